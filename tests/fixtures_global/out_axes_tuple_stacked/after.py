"""A step whose out_axes tuple gives back two per-device results, each fed to the next step:
both stay pmap's stacked rows (out_specs P(axis) each), taken by `join` as stacked rows."""
# pmap-migrate-test: original needs legacy jax
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


def _split(x):
    offset = jax.lax.axis_index("i").astype(jnp.float32)
    return (
        jax.tree.map(lambda y: jnp.expand_dims(y, 0), jnp.sum(x) + offset),
        jax.tree.map(lambda y: jnp.expand_dims(y, 0), jnp.sum(x) * offset),
    )


@jax.jit
def split(x):
    return jax.shard_map(
        _split, mesh=_mesh("i"), in_specs=(P(),), out_specs=(P("i"), P("i")), check_vma=False
    )(x)


def _join(a, b):
    a = jax.tree.map(lambda y: jnp.squeeze(y, 0), a)
    b = jax.tree.map(lambda y: jnp.squeeze(y, 0), b)
    return jax.lax.psum(jnp.sum(a * b), "i")


@jax.jit
def join(a, b):
    return jax.shard_map(
        _join, mesh=_mesh("i"), in_specs=(P("i"), P("i")), out_specs=P(), check_vma=False
    )(a, b)


def run():
    n = jax.local_device_count()
    x = np.ones((3,), np.float32)
    a, b = split(x)
    return {"total": np.asarray(join(a, b))}
