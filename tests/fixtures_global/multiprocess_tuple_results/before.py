"""Multi-process: a step whose results are a tuple, each replicated (the weights, their
moving average, a dict of pmean'd metrics), as flax's pixelcnn train step returns them. Every
result is a fully replicated global array, so the call is written as for one replicated result.
"""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def train_step(w, ema, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    w = w - 0.1 * grad
    ema = 0.9 * ema + 0.1 * w
    return w, ema, {"loss": jax.lax.pmean(jnp.sum(x), "batch")}


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    ema = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    losses = []
    for i in range(3):
        x = rng.normal(size=(n, 2, 3)).astype(np.float32)
        w, ema, metrics = train_step(w, ema, x)
        losses.append(metrics["loss"][0])
    return {"w": np.asarray(w[0]), "ema": np.asarray(ema[0]), "losses": np.asarray(losses)}
