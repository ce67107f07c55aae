"""Batches stacked by a module helper given the device count: make_data(n)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def make_data(n, per_device=4):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(n * per_device, 3)).astype(np.float32)
    return x, (x @ np.array([0.5, 0.5, 0.5], np.float32)).astype(np.float32)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    params = {
        "w": jax.device_put(jnp.zeros(3), NamedSharding(mesh, P())),
        "b": jax.device_put(jnp.zeros(()), NamedSharding(mesh, P())),
    }
    x, y = make_data(n)
    params, loss = train_step(params, x, y)
    return {"loss": np.asarray(loss)}
