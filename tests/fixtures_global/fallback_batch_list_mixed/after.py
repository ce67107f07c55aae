"""PM605: a comprehension whose elements pair a batch with a value that is not one (a plain
number per batch): it is not a list of batches, so `*batch` into the step is not followed
and the caller keeps pmap's calling contract."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@jax.jit
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=(P("batch"), P()), out_specs=P("batch")
)
def step(x, offset):
    return jax.lax.psum(jnp.sum(x) + offset, "batch")


def shard(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


def run():
    data = np.arange(jax.local_device_count() * 8, dtype=np.float32)
    batches = [(shard(data[i::2]), np.float32(i)) for i in range(2)]
    totals = [step(*batch) for batch in batches]
    return {"totals": np.stack([np.asarray(t) for t in totals])}
