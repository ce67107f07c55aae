"""PM607: a replicated stack whose value can differ between processes (it reads
jax.process_index()) cannot be placed once with P(): the site keeps pmap's contract (PM612)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map, _across_processes


@functools.partial(_across_processes, donate_argnums=(0,))
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
)
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    offset = float(jax.process_index())
    params = {"w": jnp.stack([jnp.ones(3) + offset] * n), "b": jnp.stack([jnp.zeros(())] * n)}
    x = np.random.RandomState(0).normal(size=(n, 2, 3)).astype(np.float32)
    params, loss = train_step(params, x, x.sum(axis=-1))
    return {"loss": np.asarray(loss)}
