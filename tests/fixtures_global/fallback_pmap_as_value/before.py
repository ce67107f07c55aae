"""PM601: a pmap built by a factory and returned as a value stays faithful."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def make_step():
    return jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")


def run():
    n = jax.local_device_count()
    return {"s": np.asarray(make_step()(np.ones((n, 2), np.float32)))}
