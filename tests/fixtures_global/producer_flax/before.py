"""flax's replicate / shard / unreplicate (rewrite only: flax is not installed here)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def train(params, batches):
    params = jax_utils.replicate(params)
    for batch in batches:
        x, y = common_utils.shard(batch["x"]), common_utils.shard(batch["y"])
        params, loss = train_step(params, x, y)
        print(float(loss[0]))
    return jax_utils.unreplicate(params)
