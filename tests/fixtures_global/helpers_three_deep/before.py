# pmap-migrate-test: original needs legacy jax
"""Helpers three calls deep: the training function prepares its state through `setup`, which
replicates through `replicate`, which asks `device_order` for the devices (flax's
jax_utils.replicate and its `_pmap_device_order`, reached from a project's setup function)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def device_order():
    return jax.local_devices()


def replicate(tree):
    return jax.device_put_replicated(tree, device_order())


def setup(params):
    return replicate(params)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0) * params["w"], "batch")
    return {"w": params["w"] - 0.1 * grads}


def run():
    n = jax.local_device_count()
    params = setup({"w": jnp.ones((3,), jnp.float32)})
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n, 2, 3)
    for _ in range(3):
        params = train_step(params, x)
    return {"w": np.asarray(params["w"][0])}
