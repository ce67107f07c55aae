"""Consumers of replicated results: x[0], a module unreplicate helper, tree_map(lambda a: a[0], ...), jax.device_get."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(jax.shard_map, in_specs=(P(), P(), P()), out_specs=P(), check_vma=False)
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
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        params = {"w": jax.device_put(jnp.ones(3), P()), "b": jax.device_put(jnp.zeros(()), P())}
        x = np.ones((2, 3), np.float32)
        y = np.zeros((2,), np.float32)
        params, loss = train_step(params, x, y)
        first = float(loss)
        host = jax.device_get(params)
        rows = params
        return {"first": np.asarray(first), "w": np.asarray(host["w"]), "b": np.asarray(rows["b"])}
