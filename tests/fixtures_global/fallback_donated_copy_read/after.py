"""PM610: the donated stack is read after the call. pmap donated a copy of the one-device
jnp.stack, so the original's stack survives; a jit would delete it, so run() stays faithful."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
)
def train_step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.1 * grads, params)


def run():
    n = jax.local_device_count()
    params = {"w": jnp.stack([jnp.ones((3,), jnp.float32)] * n)}
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    before = params
    params = train_step(params, x)
    return {"before": np.asarray(before["w"]), "after": np.asarray(params["w"][0])}
