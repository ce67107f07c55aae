"""Functions bound to a name and used once are read as if written in place: JAX's classic
data-parallel example replicates with `replicate_array = lambda x: np.broadcast_to(...)` mapped
over the parameters, and a nested def takes row 0 of each result. Both producers go, with the
bindings left unread."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def loss(params, batch):
    inputs, targets = batch
    w, b = params
    return jnp.mean((inputs @ w + b - targets) ** 2)


def _update(params, batch):
    grads = jax.grad(loss)(params, batch)
    grads = jax.lax.pmean(grads, axis_name="num_devices")
    return tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


@jax.jit
def update(params, batch):
    return jax.shard_map(
        _update,
        mesh=_mesh("num_devices"),
        in_specs=(P(), (P("num_devices"), P("num_devices"))),
        out_specs=P(),
        check_vma=False,
    )(params, batch)


def run():
    num_devices = jax.local_device_count()
    params = (np.zeros((4, 1), np.float32), np.zeros((1,), np.float32))
    replicated_params = params
    rng = np.random.RandomState(0)
    for _ in range(3):
        inputs = rng.randn(num_devices * 8, 4).astype(np.float32)
        targets = rng.randn(num_devices * 8, 1).astype(np.float32)
        batch = (inputs.reshape(num_devices * 8, 4), targets.reshape(num_devices * 8, 1))
        replicated_params = update(replicated_params, batch)

    return replicated_params
