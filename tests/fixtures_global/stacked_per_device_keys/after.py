"""PM611: per-device RNG keys (`jax.random.split(key, n)`, one key per device) have no batch axis to merge the device axis into, so they keep pmap's stacked layout: in_specs P(axis), squeezed by the body's first statement; the finding names the split and its line."""
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


def _noise(key):
    key = jax.tree.map(lambda y: jnp.squeeze(y, 0), key)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), jax.random.normal(key, (3,)))


@jax.jit
def noise(key):
    return jax.shard_map(
        _noise, mesh=_mesh("d"), in_specs=(P("d"),), out_specs=P("d"), check_vma=False
    )(key)


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return {"noise": np.asarray(noise(keys))}
