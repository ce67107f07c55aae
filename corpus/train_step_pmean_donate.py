"""Data-parallel SGD train step: pmap with axis_name, donate_argnums and lax.pmean.
Params are replicated via jnp.stack / np.broadcast_to; donated step outputs get deleted.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

LR = 0.1


def loss_fn(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, axis_name="batch")
    loss = jax.lax.pmean(loss, axis_name="batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return new_params, loss


def make_data(n, per_device=4, features=3):
    rng = np.random.RandomState(0)
    true_w = np.array([1.5, -2.0, 0.5], dtype=np.float32)
    x = rng.normal(size=(n, per_device, features)).astype(np.float32)
    y = x @ true_w + 0.25
    return x, y.astype(np.float32)


def run():
    n = jax.local_device_count()
    w = jnp.zeros((3,), jnp.float32)
    b = jnp.zeros((), jnp.float32)
    params = {
        "w": jnp.stack([w] * n),
        "b": np.broadcast_to(np.asarray(b), (n,)),
    }
    x, y = make_data(n)

    losses = []
    deleted = False
    for _ in range(5):
        old = params
        params, loss = train_step(params, x, y)
        losses.append(float(loss[0]))
        # After the first step `old` lives on the devices, so donation deletes it.
        deleted = old["w"].is_deleted()

    params = jax.device_get(params)
    return {
        "w": np.asarray(params["w"]),
        "b": np.asarray(params["b"]),
        "losses": np.asarray(losses),
        "donated_deleted": np.asarray(deleted),
    }
