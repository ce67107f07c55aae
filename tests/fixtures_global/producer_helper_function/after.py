"""Batches stacked by a module helper given the device count: make_data(n)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(
    jax.shard_map, in_specs=(P(), P("batch"), P("batch")), out_specs=P(), check_vma=False
)
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def make_data(n, per_device=4):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(n * per_device, 3)).astype(np.float32)
    return x, (x @ np.array([0.5, 0.5, 0.5], np.float32)).astype(np.float32)


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        params = {"w": jax.device_put(jnp.zeros(3), P()), "b": jax.device_put(jnp.zeros(()), P())}
        x, y = make_data(n)
        params, loss = train_step(params, x, y)
        return {"loss": np.asarray(loss)}
