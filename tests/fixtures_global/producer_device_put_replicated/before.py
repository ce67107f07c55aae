"""Replicated params from jax.device_put_replicated; a global batch reshaped to (n, -1, d)."""
# pmap-migrate-test: original needs legacy jax
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
    devices = jax.local_devices()
    n = len(devices)
    params = jax.device_put_replicated({"w": np.ones((3,), np.float32), "b": 0.5}, devices)
    data = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3) / 10.0
    x = data.reshape(n, -1, 3)
    y = np.sin(data[:, 0]).reshape(n, -1)
    losses = []
    for _ in range(3):
        params, loss = train_step(params, x, y)
        losses.append(float(loss[0]))
    return {"losses": np.asarray(losses), "w": np.asarray(params["w"][0])}
