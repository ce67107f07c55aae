"""A global nested pmap is called like a function the global style does not follow: only
values the caller leaves as the original had them may reach it. Here the caller hands it the
replicated total of a 1-D step as is (a value whose global form drops pmap's device axis) as
an argument the outer level maps, so the caller keeps pmap's layout (the 1-D step stays on
pmap's contract, PM612 naming the call) and the nested pmap gets the (n, 3) stack the
original gave it."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@functools.partial(jax.pmap, axis_name="i")
def total(x):
    return lax.psum(x, "i")


@functools.partial(jax.pmap, axis_name="rows")
@functools.partial(jax.pmap, axis_name="cols", in_axes=(0, None))
def grid(x, s):
    return lax.psum(x, "cols") + lax.axis_index("rows") + s


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape((n, 3)) + 1.0
    s = total(x)
    g = grid(jnp.ones((n, 1, 3)), s)
    return {"s": np.asarray(s), "g": np.asarray(g)}
