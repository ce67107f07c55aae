"""A def nested in the caller rebound to its own pmap (`step = jax.pmap(step, ...)`), with a
static argument, so the global style writes a jitted def of that name. The body's def is
renamed `_step`: a new def `step` that called `step` would call itself (the fuzz sweep found
the migrated program failing in a nested shard_map)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    params = jnp.stack([jnp.arange(2.0)] * n)
    c = np.array([0.5, -1.0], np.float32)

    def step(params, x, c, k):
        h = jax.lax.pmax(x * params + c * 0.5, axis_name="batch") * k
        return params * 0.5 + jnp.mean(h) * 0.25, jnp.sum(h)

    step = jax.pmap(step, axis_name="batch", in_axes=(0, 0, None, None),
                    static_broadcasted_argnums=(3,))
    losses = []
    for t in range(2):
        x = (np.arange(n * 2, dtype=np.float32) + t).reshape(n, 1, 2)
        params, loss = step(params, x, c, 2)
        losses.append(np.asarray(loss))
    return {"losses": np.asarray(losses), "params": np.asarray(params)}
