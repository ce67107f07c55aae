"""Consumers of replicated results: x[0], a module unreplicate helper, tree_map(lambda a: a[0], ...), jax.device_get."""
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


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def run():
    n = jax.local_device_count()
    params = {"w": jnp.stack([jnp.ones(3)] * n), "b": jnp.stack([jnp.zeros(())] * n)}
    x = np.ones((n, 2, 3), np.float32)
    y = np.zeros((n, 2), np.float32)
    params, loss = train_step(params, x, y)
    first = float(loss[0])
    host = jax.device_get(unreplicate(params))
    rows = jax.tree_util.tree_map(lambda a: a[0], params)
    return {"first": np.asarray(first), "w": np.asarray(host["w"]), "b": np.asarray(rows["b"])}
