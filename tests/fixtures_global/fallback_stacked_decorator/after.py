"""PM602: pmap stacked with a decorator other than a bare jax.jit (here jax.checkpoint below
it): what the decorator does to the mapped function is not followed."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from _pmap_helpers import _first_replica, _pmap_style_shard_map


@functools.partial(_pmap_style_shard_map, axis_name="i")
@functools.partial(jax.checkpoint, prevent_cse=False)
def total(x):
    return jax.lax.psum(jnp.sin(x), "i")


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2), np.float32)
    return {"total": np.asarray(_first_replica(total(x)))}
