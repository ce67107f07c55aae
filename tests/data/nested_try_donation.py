"""Drawn by the differential run of the statement-interpreter move: nested trys in a caller of
a donating step. The donation check took an outer try's list of states for the inner one's
(`list.remove` finds the first equal list) and raised ValueError."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x):
    shift = jax.lax.pmean(jnp.mean(x), "batch")
    total = jax.lax.pmean(jnp.sum(x), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.5 * shift, params), total


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
    params = jnp.stack([np.ones((3,), np.float32)] * n)
    old = params
    total = 0
    old = jnp.asarray(params)
    try:
        try:
            del old
            while n > 0:
                params = jax.device_put_replicated(np.ones((3,)), jax.local_devices())
            if n > 1:
                print(params)
                def inner():
                    return params
            for i in range(1):
                break
                break
                params = jnp.stack([np.ones((3,), np.float32)] * n)
                continue
            else:
                params, total = train_step(params, x)
                def inner():
                    return params
        except Exception:
            for i in range(3):
                total += 1
                continue
                break
        finally:
            total += 1
            for i in range(0):
                def inner():
                    return params
                continue
                params = jax.device_put_replicated(np.ones((3,)), jax.local_devices())
        def inner():
            return params
        x = np.asarray(x)
        acc = []
    except Exception:
        params, total = train_step(params, x)
    del old
    while n > 0:
        x = np.asarray(x)
        for i in range(0):
            old = jnp.asarray(params)
            old = jnp.asarray(params)
            while n > 0:
                break
                del old
                del old
    return params
