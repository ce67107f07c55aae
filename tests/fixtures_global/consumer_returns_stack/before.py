"""The entry returns the replicated stack and a list of per-step stacks: the layout map records both."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    params = {"w": jnp.stack([jnp.ones(3)] * n), "b": jnp.stack([jnp.zeros(())] * n)}
    x = np.ones((n, 2, 3), np.float32)
    y = np.zeros((n, 2), np.float32)
    losses = []
    for _ in range(2):
        params, loss = train_step(params, x, y)
        losses.append(np.asarray(loss))
    return {"params": jax.device_get(params), "losses": np.stack(losses)}
