# pmap-migrate-test: original needs legacy jax
"""Helpers three calls deep: the training function prepares its state through `setup`, which
replicates through `replicate`, which asks `device_order` for the devices (flax's
jax_utils.replicate and its `_pmap_device_order`, reached from a project's setup function)."""
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


def device_order():
    return jax.local_devices()


def replicate(tree):
    return jax.device_put(tree, NamedSharding(_mesh("batch"), P()))


def setup(params):
    return replicate(params)


def _train_step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0) * params["w"], "batch")
    return {"w": params["w"] - 0.1 * grads}


@jax.jit
def train_step(params, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x)


def run():
    n = jax.local_device_count()
    params = setup({"w": jnp.ones((3,), jnp.float32)})
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n * 2, 3)
    for _ in range(3):
        params = train_step(params, x)
    return {"w": np.asarray(params["w"])}
