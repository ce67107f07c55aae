"""PM611: one number per device (`np.arange(n)`) into a body that builds arrays from it (`x * jnp.ones(3)`): a (1,) block would give other shapes, so the numbers stay stacked and the body squeezes its block to pmap's scalar."""
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


def _spread(x):
    x = jax.tree.map(lambda y: jnp.squeeze(y, 0), x)
    return jax.lax.psum(x * jnp.ones(3), "i")


@jax.jit
def spread(x):
    return jax.shard_map(
        _spread, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    return {"spread": np.asarray(spread(np.arange(n, dtype=np.float32)))}
