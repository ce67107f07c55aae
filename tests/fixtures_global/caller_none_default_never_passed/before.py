# pmap-migrate-test: original needs legacy jax
"""brax's trainers cap the devices used per host with a parameter that defaults to None:
`if max_devices_per_host: local_devices_to_use = min(...)`. No call here passes it, so the
branch never runs and the count stays the device count."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0) * params, "i")
    return params - 0.1 * grads


def train(steps, max_devices_per_host=None):
    local_devices_to_use = jax.local_device_count()
    if max_devices_per_host:
        local_devices_to_use = min(local_devices_to_use, max_devices_per_host)
    params = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices()[:local_devices_to_use])
    x = np.arange(local_devices_to_use * 2 * 3, dtype=np.float32).reshape(
        local_devices_to_use, 2, 3)
    for _ in range(steps):
        params = step(params, x)
    return jax.device_get(jax.tree_util.tree_map(lambda a: a[0], params))


def run():
    return {"params": np.asarray(train(3))}
