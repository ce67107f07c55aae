"""pmap stacked with a bare jax.jit: above it (jit of the new jit is that jit), below it (the
body is a jitted function, traced inside shard_map), and `jax.jit(jax.pmap(f))` built and
called."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("i"),), out_specs=P("i"), check_vma=False)
def normalized(x):
    return x / jax.lax.psum(jnp.sum(x), "i")


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("i"),), out_specs=P(), check_vma=False)
@jax.jit
def centered_total(x):
    return jax.lax.psum(jnp.sum(x - jax.lax.pmean(jnp.mean(x), "i")), "i")


def block(x):
    return x + jax.lax.pmax(x, "i")


jitted_block = jax.jit(jax.shard_map(
    block,
    in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.linspace(0.1, 1.0, n * 3, dtype=np.float32)
        return {
            "normalized": np.asarray(normalized(x)),
            "centered_total": np.asarray(centered_total(x)),
            "block": np.asarray(jitted_block(x)),
            "block_again": np.asarray(jitted_block(x + 1.0)),
        }
