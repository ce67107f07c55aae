"""Sites of two axis names in one statement, read to the host there: the site calls become
locals (each under its mesh), and the host reads, which run no user code, read the locals."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(jnp.max(x), "j")


total_sharded = jax.jit(jax.shard_map(total, in_specs=(P("i"),), out_specs=P(), check_vma=False))
largest_sharded = jax.jit(jax.shard_map(
    largest,
    in_specs=(P("j"),), out_specs=P(), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    mesh_j = jax.make_mesh((jax.device_count(),), ("j",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32)
        t = total_sharded(x)
        with jax.set_mesh(mesh_j):
            m = largest_sharded(x)
        return {
            "t": np.asarray(t),
            "m": float(m),
        }
