"""A value flows from a site of one axis name to a site of another, and is donated there: the
two meshes have the same devices in the same order, so P("i") on one is P("j") on the other."""
# pmap-migrate-test: original needs legacy jax
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


def _centered(x):
    return x - jax.lax.pmean(x, "i")


@jax.jit
def centered(x):
    return jax.shard_map(
        _centered, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
    )(x)


def _scaled(x, w):
    return x * w / (jax.lax.pmax(jnp.max(jnp.abs(x)), "j") + 1.0)


@functools.partial(jax.jit, donate_argnums=(0,))
def scaled(x, w):
    return jax.shard_map(
        _scaled, mesh=_mesh("j"), in_specs=(P("j"), P()), out_specs=P("j"), check_vma=False
    )(x, w)


def run():
    mesh = _mesh("i")
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32)
    w = jax.device_put(jnp.float32(2.0), NamedSharding(mesh, P()))
    c = centered(x)
    for _ in range(2):
        c = scaled(c, w)
        c = centered(c)
    return {"c": np.asarray(c), "w": np.asarray(w)}
