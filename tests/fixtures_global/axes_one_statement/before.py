"""Sites of two axis names called in one statement (a dict literal): each step names its own
axis's mesh, so the statement, and the order it calls them in, stay as they are."""
import functools

import jax
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def total(x):
    return jax.lax.psum(x, "i")


@functools.partial(jax.pmap, axis_name="j")
def largest(x):
    return jax.lax.pmax(x, "j")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = {
        "first": total(x),
        "top": largest(x),
        "top_again": largest(x * 2),
        "total": total(x + 1),
    }
    return out
