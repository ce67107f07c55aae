"""A batch times or plus a plain number (a literal, a local name bound to one,
`jax.process_index()`) is still a batch: the operation acts row by row, so it merges."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def step(x):
    return jax.lax.psum(jnp.sum(x, axis=0), "batch")


@jax.jit
def p_step(x):
    return jax.shard_map(
        step, mesh=_mesh("batch"), in_specs=(P("batch"),), out_specs=P(), check_vma=False
    )(x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    scale = 0.5
    x = np.arange(n * 6, dtype=np.float32).reshape((n * 2, 3)) * scale + jax.process_index()
    y = 2.0 * (x - 1)
    return {"x": np.asarray(p_step(
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    )), "y": np.asarray(p_step(
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), y),
    ))}
