"""The stacked params' shape is read after the step, and that would change once the device axis
is gone (PM605 before results were read one by one): the step returns a tuple, so that result
alone comes back in pmap's stacked layout (n equal rows, out_specs P(axis)) and the loss is
replicated (P())."""
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
    params, loss = train_step(params, np.ones((n, 2, 3), np.float32), np.zeros((n, 2), np.float32))
    return {"loss": np.asarray(loss), "shape": np.asarray(params["w"].shape)}
