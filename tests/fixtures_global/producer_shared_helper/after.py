"""Module helpers used by several functions, as a program's vendored flax utilities are: a
device order, and a `replicate` whose devices default to it (`devices or device_order()`).
`device_order` is followed although others call it, because it needs no rewrite: it stays
the same function for every caller. `replicate` is called by `run` only, so it is rewritten."""
# pmap-migrate-test: original needs legacy jax
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


def replicate(tree, devices=None):
    devices = devices or device_order()
    return jax.device_put(tree, NamedSharding(_mesh("batch"), P()))


def device_names():
    return [str(d) for d in device_order()]


def _step(w, x):
    return w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0) * w, "batch")


@jax.jit
def step(w, x):
    return jax.shard_map(
        _step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, x)


def run():
    n = jax.local_device_count()
    w = replicate(jnp.ones(3, jnp.float32))
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3)
    for _ in range(2):
        w = step(w, x)
    return {"w": np.asarray(w), "devices": np.asarray(len(device_names()))}
