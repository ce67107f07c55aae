"""PM602: pmap stacked with a decorator other than a bare jax.jit (here jax.checkpoint below
it): what the decorator does to the mapped function is not followed."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@jax.jit
@functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
@functools.partial(jax.checkpoint, prevent_cse=False)
def total(x):
    return jax.lax.psum(jnp.sin(x), "i")


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2), np.float32)
    return {"total": np.asarray(total(x)[0])}
