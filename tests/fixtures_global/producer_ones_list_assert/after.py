"""A device sync as big_vision and brax write it: one per device from `jnp.ones([n])` (a list
shape), psummed, and the result checked with an assert and a raise on the host."""
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


def _sync(x):
    return jax.lax.psum(x, "i")


@jax.jit
def _sync_sharded(x):
    return jax.shard_map(
        _sync, mesh=_mesh("i"), in_specs=(P(),), out_specs=P(), check_vma=False
    )(x)


def sync():
    mesh = _mesh("i")
    x = jax.device_put(jnp.ones(()), NamedSharding(mesh, P()))
    x = jax.device_get(_sync_sharded(x))
    assert x == jax.device_count(), f"sync saw {x} devices"
    if x < 1:
        raise RuntimeError(f"no devices: {x}")
    return x


def run():
    return {"count": np.asarray(sync())}
