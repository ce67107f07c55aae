"""Two axis names in one function, each in its own statements: each step runs on the mesh of its
own axis ("i" or "j", the same devices in the same order), and the function is not edited."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(x, "j")


def smallest(x):
    return jax.lax.pmin(x, "j")


@jax.jit
def total_sharded(x):
    return jax.shard_map(
        total, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


@jax.jit
def largest_sharded(x):
    return jax.shard_map(
        largest, mesh=_mesh("j"), in_specs=(P("j"),), out_specs=P(), check_vma=False
    )(x)


@jax.jit
def smallest_sharded(x):
    return jax.shard_map(
        smallest, mesh=_mesh("j"), in_specs=(P("j"),), out_specs=P(), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    t = total_sharded(x)
    m = largest_sharded(x)
    s = smallest_sharded(x)
    return {"total": np.asarray(t), "largest": np.asarray(m), "smallest": np.asarray(s)}
