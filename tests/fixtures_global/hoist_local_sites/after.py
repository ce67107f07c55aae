"""Local and inline pmaps: built once at module level where that is the same callable.

Each function is an entry point of its own."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

SCALE = 2.0
FACTOR = 1.0
FACTOR = 3.0


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def total(x):
    return jax.lax.psum(x, "i")


def scaled(x):
    return x * SCALE


# Built from module-level names only: moves above this function.
@jax.jit
def p_total(x):
    return jax.shard_map(
        total, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


@jax.jit
def scaled_sharded(x):
    return jax.shard_map(
        scaled, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    # Inline, of a module-level function: gets a module-level name.
    s = scaled_sharded(x)
    return {"total": np.asarray(p_total(x)), "scaled": np.asarray(s)}


def kept_closure(offset):
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    # The lambda reads a local: it stays where it is built.
    p_shift = jax.jit(jax.shard_map(
        lambda v: v + offset,
        mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
    ))
    return np.asarray(p_shift(x))


def kept_rebound_constant():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    # FACTOR is bound twice at module level: not a constant import time can read.
    p_times = jax.jit(jax.shard_map(
        lambda v: v * FACTOR,
        mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
    ))
    return np.asarray(p_times(x))


def kept_builtin_name():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    sum = jax.jit(jax.shard_map(
        total,
        mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False,
    ))
    return np.asarray(sum(x))


def kept_later_function():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    # `late` is defined below this function: import time would not see it yet.
    p_late = jax.jit(jax.shard_map(
        late,
        mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False,
    ))
    return np.asarray(p_late(x))


def late(x):
    return jax.lax.pmax(x, "i")
