"""PM603: a call with a keyword argument (pmap maps it on axis 0) and a call relying on the
default: one in_specs tuple cannot describe both, so the site stays faithful."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@jax.jit
@functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
def masked_sum(x, mask=None):
    if mask is None:
        mask = jnp.ones_like(x)
    return jax.lax.psum(jnp.sum(x * mask), "i")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    mask = np.ones((n, 4), np.float32)
    return {"plain": np.asarray(masked_sum(x)), "masked": np.asarray(masked_sum(x, mask=mask))}
