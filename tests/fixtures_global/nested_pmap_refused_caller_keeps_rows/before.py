"""A caller of a nested pmap that stays on pmap's contract (its axis name is not a literal,
which the 2-D form needs) and of a 1-D step: the caller keeps pmap's rows and the 1-D step
stays on pmap's contract too (PM612, naming the nested pmap), since only a nested pmap written
in the global style takes a global caller's values as the original took them."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROWS = "rows"


@functools.partial(jax.pmap, axis_name="i")
def scale(x):
    return x * 2.0 / lax.psum(x.sum(), "i")


@functools.partial(jax.pmap, axis_name=ROWS)
@functools.partial(jax.pmap, axis_name="cols")
def grid(x):
    return lax.psum(x, "cols") + lax.axis_index(ROWS)


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape((n, 3)) + 1.0
    y = scale(x)
    g = grid(y.reshape((n // 2, 2, 3)))
    z = scale(g.reshape((n, 3)))
    return {"y": np.asarray(y), "g": np.asarray(g), "z": np.asarray(z)}
