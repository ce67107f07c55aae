"""pmap stacked with a bare jax.jit: above it (jit of the new jit is that jit), below it (the
body is a jitted function, traced inside shard_map), and `jax.jit(jax.pmap(f))` built and
called."""
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


def _normalized(x):
    return x / jax.lax.psum(jnp.sum(x), "i")


@jax.jit
def normalized(x):
    return jax.shard_map(
        _normalized, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
    )(x)


@jax.jit
def _centered_total(x):
    return jax.lax.psum(jnp.sum(x - jax.lax.pmean(jnp.mean(x), "i")), "i")


@jax.jit
def centered_total(x):
    return jax.shard_map(
        _centered_total, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


def block(x):
    return x + jax.lax.pmax(x, "i")


@jax.jit
def jitted_block(x):
    return jax.shard_map(
        block, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.linspace(0.1, 1.0, n * 3, dtype=np.float32)
    return {
        "normalized": np.asarray(normalized(x)),
        "centered_total": np.asarray(centered_total(x)),
        "block": np.asarray(jitted_block(x)),
        "block_again": np.asarray(jitted_block(x + 1.0)),
    }
