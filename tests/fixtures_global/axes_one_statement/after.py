"""Sites of two axis names called in one statement (a dict literal): their calls become named
locals, in the order the dict evaluated them, each group under its axis's mesh."""
import functools

import jax
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("i"),), out_specs=P(), check_vma=False)
def total(x):
    return jax.lax.psum(x, "i")


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("j"),), out_specs=P(), check_vma=False)
def largest(x):
    return jax.lax.pmax(x, "j")


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    mesh_j = jax.make_mesh((jax.device_count(),), ("j",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        first = total(x)
        with jax.set_mesh(mesh_j):
            top = largest(x)
            top_again = largest(x * 2)
        total_2 = total(x + 1)
        out = {
            "first": first,
            "top": top,
            "top_again": top_again,
            "total": total_2,
        }
        return out
