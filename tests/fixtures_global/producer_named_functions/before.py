"""Functions bound to a name and used once are read as if written in place: JAX's classic
data-parallel example replicates with `replicate_array = lambda x: np.broadcast_to(...)` mapped
over the parameters, and a nested def takes row 0 of each result. Both producers go, with the
bindings left unread."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util


def loss(params, batch):
    inputs, targets = batch
    w, b = params
    return jnp.mean((inputs @ w + b - targets) ** 2)


@functools.partial(jax.pmap, axis_name="num_devices")
def update(params, batch):
    grads = jax.grad(loss)(params, batch)
    grads = jax.lax.pmean(grads, axis_name="num_devices")
    return tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def run():
    num_devices = jax.local_device_count()
    params = (np.zeros((4, 1), np.float32), np.zeros((1,), np.float32))
    replicate_array = lambda x: np.broadcast_to(x, (num_devices,) + x.shape)
    replicated_params = tree_util.tree_map(replicate_array, params)
    rng = np.random.RandomState(0)
    for _ in range(3):
        inputs = rng.randn(num_devices * 8, 4).astype(np.float32)
        targets = rng.randn(num_devices * 8, 1).astype(np.float32)
        batch = (inputs.reshape(num_devices, 8, 4), targets.reshape(num_devices, 8, 1))
        replicated_params = update(replicated_params, batch)

    def first_copy(x):
        return x[0]

    return tree_util.tree_map(first_copy, replicated_params)
