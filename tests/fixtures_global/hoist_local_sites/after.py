"""Local and inline pmaps: built once at module level where that is the same callable.

Each function is an entry point of its own."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

SCALE = 2.0
FACTOR = 1.0
FACTOR = 3.0


def total(x):
    return jax.lax.psum(x, "i")


def scaled(x):
    return x * SCALE


# Built from module-level names only: moves above this function.
p_total = jax.jit(jax.shard_map(total, in_specs=(P("i"),), out_specs=P(), check_vma=False))
scaled_sharded = jax.jit(jax.shard_map(
    scaled,
    in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        # Inline, of a module-level function: gets a module-level name.
        s = scaled_sharded(x)
        return {"total": np.asarray(p_total(x)), "scaled": np.asarray(s)}


def kept_closure(offset):
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        # The lambda reads a local: it stays where it is built.
        p_shift = jax.jit(jax.shard_map(
            lambda v: v + offset,
            in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
        ))
        return np.asarray(p_shift(x))


def kept_rebound_constant():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        # FACTOR is bound twice at module level: not a constant import time can read.
        p_times = jax.jit(jax.shard_map(
            lambda v: v * FACTOR,
            in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
        ))
        return np.asarray(p_times(x))


def kept_builtin_name():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        sum = jax.jit(jax.shard_map(total, in_specs=(P("i"),), out_specs=P(), check_vma=False))
        return np.asarray(sum(x))


def kept_later_function():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        # `late` is defined below this function: import time would not see it yet.
        p_late = jax.jit(jax.shard_map(late, in_specs=(P("i"),), out_specs=P(), check_vma=False))
        return np.asarray(p_late(x))


def late(x):
    return jax.lax.pmax(x, "i")
