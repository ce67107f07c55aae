"""PM605: the data of a per-device batch's shard is used (the migrated shard is the device's block, without pmap's leading axis of 1)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map, _device_put_sharded


@jax.jit
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
)
def total(x):
    return jax.lax.psum(jnp.sum(x), "batch")


def run():
    devices = jax.local_devices()
    n = len(devices)
    xs = np.random.default_rng(0).normal(size=(n, 2, 3)).astype(np.float32)
    x = _device_put_sharded([xs[i] for i in range(n)], devices)
    first = np.asarray(x.addressable_shards[0].data)
    return {"total": np.asarray(total(x)), "first": first}
