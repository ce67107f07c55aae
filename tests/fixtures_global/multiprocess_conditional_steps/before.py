"""Multi-process steps under conditions. `every` is a parameter, so `i % every == 0` could
differ between processes: the eval step under it waits for every process in its psum, in the
original as in the migration, and its batch is made global at the call without waiting. The
scale replicated under that condition keeps pmap's stacked layout: placed with P(), it would
wait for every process to place it. Process 0 alone runs a step without collectives."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


@functools.partial(jax.pmap, axis_name="batch")
def evaluate(w, scale, x):
    return jax.lax.psum(jnp.sum(x @ w) * scale, "batch")


@functools.partial(jax.pmap, axis_name="batch")
def predict(w, x):
    return x @ w


def run(every=2):
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    losses, predictions = [], []
    for i in range(4):
        x = rng.normal(size=(n, 2, 3)).astype(np.float32)
        w = train_step(w, x)
        if i % every == 0:
            scale = jax.device_put_replicated(jnp.float32(i + 1), jax.local_devices())
            losses.append(evaluate(w, scale, x))
        if jax.process_index() == 0:
            predictions.append(np.asarray(predict(w, x)))
    return {"w": np.asarray(w[0]), "losses": np.stack([np.asarray(l) for l in losses]),
            "predictions": np.asarray(predictions, np.float32).reshape(-1, 2)}
