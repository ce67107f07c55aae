"""Module helpers used by several functions, as a program's vendored flax utilities are: a
device order, and a `replicate` whose devices default to it (`devices or device_order()`).
`device_order` is followed although others call it, because it needs no rewrite: it stays
the same function for every caller. `replicate` is called by `run` only, so it is rewritten."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def device_order():
    return jax.local_devices()


def replicate(tree, devices=None):
    devices = devices or device_order()
    return jax.device_put_replicated(tree, devices)


def device_names():
    return [str(d) for d in device_order()]


@functools.partial(jax.pmap, axis_name="batch")
def step(w, x):
    return w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0) * w, "batch")


def run():
    n = jax.local_device_count()
    w = replicate(jnp.ones(3, jnp.float32))
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3)
    for _ in range(2):
        w = step(w, x)
    return {"w": np.asarray(w[0]), "devices": np.asarray(len(device_names()))}
