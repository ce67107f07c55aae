"""Sites of two axis names called in one statement (a dict literal): each step names its own
axis's mesh, so the statement, and the order it calls them in, stay as they are."""
import functools

import jax
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _total(x):
    return jax.lax.psum(x, "i")


@jax.jit
def total(x):
    return jax.shard_map(
        _total, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


def _largest(x):
    return jax.lax.pmax(x, "j")


@jax.jit
def largest(x):
    return jax.shard_map(
        _largest, mesh=_mesh("j"), in_specs=(P("j"),), out_specs=P(), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32)
    out = {
        "first": total(x),
        "top": largest(x),
        "top_again": largest(x * 2),
        "total": total(x + 1),
    }
    return out
