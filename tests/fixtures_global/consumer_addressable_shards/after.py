"""`.addressable_shards[k].data` of pmap arrays: of a replicated result it is device k's (1, ...) row, so `[0]` of it becomes direct use; of a batch placed per device only its `.shape` is read, given back with pmap's leading 1."""
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


def _mean_loss(w, x):
    return jax.lax.pmean(jnp.mean((x @ w) ** 2), "batch")


@jax.jit
def mean_loss(w, x):
    return jax.shard_map(
        _mean_loss, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, x)


def run():
    mesh = _mesh("batch")
    devices = jax.local_devices()
    n = len(devices)
    xs = np.linspace(-1.0, 1.0, n * 4 * 3, dtype=np.float32).reshape(n * 4, 3)
    x = jax.device_put(xs, NamedSharding(mesh, P("batch")))
    w = jax.device_put(np.ones(3, np.float32), NamedSharding(mesh, P()))
    loss = mean_loss(w, x)
    return {
        "loss": np.asarray(loss.addressable_shards[0].data),
        "x_shard_shape": np.array((1, *x.addressable_shards[0].data.shape)),
    }
