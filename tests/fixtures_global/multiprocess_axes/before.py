"""Multi-process, two axis names: a training step on "batch" and an evaluation on "eval". Both
meshes are over all global devices in the same order, so each process's rows become one global
array on the mesh of the site that takes them."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


@functools.partial(jax.pmap, axis_name="eval")
def evaluate(w, x):
    return jax.lax.psum(jnp.sum(x @ w), "eval")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    for _ in range(2):
        x = rng.normal(size=(n, 4, 3)).astype(np.float32)
        w = train_step(w, x)
    score = evaluate(w, x)
    return {"w": np.asarray(w[0]), "score": np.asarray(score[0])}
