"""PM611: a caller of two steps: the sampler takes per-device keys stacked, its per-device results feed the train step stacked again, while the params go in replicated (P())."""
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
    y = jax.tree.map(lambda y: jnp.squeeze(y, 0), y)

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
        in_specs=(P(), P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def _sample(key):
    key = jax.tree.map(lambda y: jnp.squeeze(y, 0), key)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), jax.random.normal(key, (2,)))


@jax.jit
def sample(key):
    return jax.shard_map(
        _sample, mesh=_mesh("batch"), in_specs=(P("batch"),), out_specs=P("batch"), check_vma=False
    )(key)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    params = {
        "w": jax.device_put(jnp.ones(3), NamedSharding(mesh, P())),
        "b": jax.device_put(jnp.zeros(()), NamedSharding(mesh, P())),
    }
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    noise = sample(keys)
    params, loss = train_step(params, np.ones((2, 3), np.float32), np.asarray(noise))
    return {"loss": np.asarray(loss)}
