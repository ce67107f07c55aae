# pmap-migrate-test: original needs legacy jax
"""brax's trainers cap the devices used per host with a parameter that defaults to None:
`if max_devices_per_host: local_devices_to_use = min(...)`. No call here passes it, so the
branch never runs and the count stays the device count."""
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


def _step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0) * params, "i")
    return params - 0.1 * grads


@jax.jit
def step(params, x):
    return jax.shard_map(
        _step, mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=P(), check_vma=False
    )(params, x)


def train(steps, max_devices_per_host=None):
    mesh = _mesh("i")
    local_devices_to_use = jax.local_device_count()
    if max_devices_per_host:
        local_devices_to_use = min(local_devices_to_use, max_devices_per_host)
    params = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    x = np.arange(local_devices_to_use * 2 * 3, dtype=np.float32).reshape(
        local_devices_to_use * 2, 3
    )
    for _ in range(steps):
        params = step(params, x)
    return jax.device_get(params)


def run():
    return {"params": np.asarray(train(3))}
