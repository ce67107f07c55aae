"""A mapped function with a default, called with every parameter positionally: the default is
never used, so one in_specs tuple describes every call."""
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


def _weighted_mean(x, w=1.0):
    return jax.lax.psum(jnp.sum(x * w), "i") / jax.lax.psum(jnp.sum(w * jnp.ones_like(x)), "i")


@jax.jit
def weighted_mean(x, w):
    return jax.shard_map(
        _weighted_mean, mesh=_mesh("i"), in_specs=(P("i"), P("i")), out_specs=P(), check_vma=False
    )(x, w)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32)
    w = np.linspace(0.5, 1.5, n * 4, dtype=np.float32)
    return {"mean": np.asarray(weighted_mean(x, w))}
