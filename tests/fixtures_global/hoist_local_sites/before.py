"""Local and inline pmaps: built once at module level where that is the same callable.

Each function is an entry point of its own."""
import jax
import jax.numpy as jnp
import numpy as np

SCALE = 2.0
FACTOR = 1.0
FACTOR = 3.0


def total(x):
    return jax.lax.psum(x, "i")


def scaled(x):
    return x * SCALE


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    # Built from module-level names only: moves above this function.
    p_total = jax.pmap(total, axis_name="i")
    # Inline, of a module-level function: gets a module-level name.
    s = jax.pmap(scaled, axis_name="i")(x)
    return {"total": np.asarray(p_total(x)), "scaled": np.asarray(s)}


def kept_closure(offset):
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    # The lambda reads a local: it stays where it is built.
    p_shift = jax.pmap(lambda v: v + offset, axis_name="i")
    return np.asarray(p_shift(x))


def kept_rebound_constant():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    # FACTOR is bound twice at module level: not a constant import time can read.
    p_times = jax.pmap(lambda v: v * FACTOR, axis_name="i")
    return np.asarray(p_times(x))


def kept_builtin_name():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    sum = jax.pmap(total, axis_name="i")
    return np.asarray(sum(x))


def kept_later_function():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    # `late` is defined below this function: import time would not see it yet.
    p_late = jax.pmap(late, axis_name="i")
    return np.asarray(p_late(x))


def late(x):
    return jax.lax.pmax(x, "i")
