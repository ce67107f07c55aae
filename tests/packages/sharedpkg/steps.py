# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def step(params, x):
    return jax.lax.pmean(jnp.sum(x * params), "batch")


def demo():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    x = np.ones((n, 2, 3), np.float32)
    return step(params, x)[0]
