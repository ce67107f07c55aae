"""Two axis names in one function, each in its own statements: the function runs under the mesh
of its most-called axis ("j"), and the statement calling the "i" site goes under a second mesh
of the same devices whose one axis is named "i"."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(x, "j")


def smallest(x):
    return jax.lax.pmin(x, "j")


total_sharded = jax.jit(jax.shard_map(total, in_specs=(P("i"),), out_specs=P(), check_vma=False))
largest_sharded = jax.jit(jax.shard_map(
    largest,
    in_specs=(P("j"),), out_specs=P(), check_vma=False,
))
smallest_sharded = jax.jit(jax.shard_map(
    smallest,
    in_specs=(P("j"),), out_specs=P(), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("j",), axis_types=(AxisType.Auto,))
    mesh_i = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        with jax.set_mesh(mesh_i):
            t = total_sharded(x)
        m = largest_sharded(x)
        s = smallest_sharded(x)
        return {"total": np.asarray(t), "largest": np.asarray(m), "smallest": np.asarray(s)}
