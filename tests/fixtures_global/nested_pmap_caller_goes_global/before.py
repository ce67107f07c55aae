"""A caller of a nested pmap and of a 1-D step: the nested pmap goes global over its 2-D mesh,
taking and returning pmap's rows, so the caller may call it like a function it does not
follow, handing it only values it leaves as the original had them (`y.reshape` to an explicit
shape is the same array either way); the 1-D step goes global with it."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@functools.partial(jax.pmap, axis_name="i")
def scale(x):
    return x * 2.0 / lax.psum(x.sum(), "i")


@functools.partial(jax.pmap, axis_name="rows")
@functools.partial(jax.pmap, axis_name="cols")
def grid(x):
    return lax.psum(x, "cols") + lax.axis_index("rows")


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape((n, 3)) + 1.0
    y = scale(x)
    g = grid(y.reshape((n // 2, 2, 3)))
    z = scale(g.reshape((n, 3)))
    return {"y": np.asarray(y), "g": np.asarray(g), "z": np.asarray(z)}
