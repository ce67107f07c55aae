"""out_axes=(0, None): a per-device result keeps its device axis (P(axis)), a proven-replicated
one is returned unstacked (P()); out_axes=(0, 0) with a reduced first result is a replicated
stack whose row 0 becomes direct use."""
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


def normalize(x):
    total = jax.lax.psum(jnp.sum(x), "i")
    count = jax.lax.psum(x.shape[0], "i")
    mean = total / count
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), x - mean), mean


def spread(x):
    return (
        jax.lax.pmax(jnp.max(x), "i") - jax.lax.pmin(jnp.min(x), "i"),
        jax.tree.map(lambda y: jnp.expand_dims(y, 0), x * 2.0),
    )


@jax.jit
def p_normalize(x):
    return jax.shard_map(
        normalize, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=(P("i"), P()), check_vma=False
    )(x)


@jax.jit
def p_spread(x):
    return jax.shard_map(
        spread, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=(P(), P("i")), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32)
    centered, mean = p_normalize(x)
    width, doubled = p_spread(x)
    return {
        "centered": np.asarray(centered),
        "mean": np.asarray(mean),
        "width": np.asarray(width),
        "doubled": np.asarray(doubled),
    }
