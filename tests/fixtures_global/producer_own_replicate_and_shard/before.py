"""A program's own `replicate` and `shard`, written as flax's are (a stack of each leaf per
local device, a reshape to (local_device_count, -1) + x.shape[1:]), each called from one
function only: followed like helpers, so the
params go in replicated (P()) and the batches merged (P(axis))."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def replicate(tree):
    return jax.tree_util.tree_map(lambda x: jnp.stack([x] * jax.local_device_count()), tree)


def shard(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return params, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    params = replicate({"w": jnp.zeros(3), "b": jnp.zeros(())})
    losses = []
    for _ in range(3):
        x = rng.normal(size=(n * 4, 3)).astype(np.float32)
        y = x @ np.array([1.0, -1.0, 0.5], np.float32)
        params, loss = train_step(params, shard(x), shard(y))
        losses.append(loss[0])
    return {"losses": np.asarray(losses), "w": np.asarray(params["w"][0])}
