"""Per-device batches with jax.device_put_sharded of rows, and of a row-wise function of rows."""
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
    params = jax.device_put_replicated({"w": np.zeros((3,), np.float32), "b": np.float32(0.0)}, devices)
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(n, 4, 3)).astype(np.float32)
    x = jax.device_put_sharded([xs[i] for i in range(n)], devices)
    y = jax.device_put_sharded([xs[i] @ np.ones((3,), np.float32) for i in range(n)], devices)
    params, loss = train_step(params, x, y)
    return {"loss": np.asarray(loss[0])}
