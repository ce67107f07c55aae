"""A step returning a tuple: the new params (replicated: pmean'd grads), the loss (pmean) and
per-device predictions. Each result gets its own layout, as with out_axes=(0, 0, 0): the params
loop back replicated (P()), the predictions keep their device axis (expanded, P(axis))."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch"), jnp.sum(x @ new_params["w"])


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    params = {"w": jnp.stack([jnp.zeros(3)] * n), "b": jnp.stack([jnp.float32(0.0)] * n)}
    sums = []
    for _ in range(3):
        x = rng.normal(size=(n, 4, 3)).astype(np.float32)
        y = x @ np.array([1.0, -1.0, 0.5], np.float32)
        params, loss, per_device = train_step(params, x, y)
        sums.append(np.asarray(per_device))
    return {"loss": np.asarray(loss[0]), "sums": np.stack(sums), "w": np.asarray(params["w"][0])}
