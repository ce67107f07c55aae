"""Two axis names in one function, each in its own statements: the function runs under the mesh
of its most-called axis ("j"), and the statement calling the "i" site goes under a second mesh
of the same devices whose one axis is named "i"."""
import jax
import jax.numpy as jnp
import numpy as np


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(x, "j")


def smallest(x):
    return jax.lax.pmin(x, "j")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.pmap(total, axis_name="i")(x)
    m = jax.pmap(largest, axis_name="j")(x)
    s = jax.pmap(smallest, axis_name="j")(x)
    return {"total": np.asarray(t), "largest": np.asarray(m), "smallest": np.asarray(s)}
