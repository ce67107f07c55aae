"""PM605 then PM612: a pmapped closure reads its caller's replicated stack (`w[0]`), whose layout
the global style would change, so the site keeps pmap's calling contract."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def train():
    n = jax.local_device_count()
    w = jnp.stack([jnp.ones(3)] * n)

    @jax.jit
    @functools.partial(
        _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
    )
    def apply(x):
        return x @ w[0]  # reads the caller's replicated stack

    x = np.ones((n, 2, 3), np.float32)
    return apply(x)


def run():
    return {"y": np.asarray(train())}
