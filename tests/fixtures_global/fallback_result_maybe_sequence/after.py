"""PM605: `out[0]` of a step whose code returns a name bound to a tuple: it is the tuple's first element, not device 0's row, and the tool cannot show which."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@jax.jit
@functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
def step(w, x):
    out = (w * 2.0, jax.lax.psum(jnp.sum(x), "i"))
    return out


def run():
    n = jax.local_device_count()
    w = jnp.stack([jnp.arange(3.0)] * n)
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    res = step(w, x)
    return {"first": np.asarray(res[0])}
