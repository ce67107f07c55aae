"""A module helper that the global style would have to rewrite (its reshape to the device
count becomes a merged batch), called by two functions: the other reads the shape of what
it returns, which the rewrite would change, so `step` keeps pmap's calling contract and the
finding names that read."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def shard(x):
    return x.reshape(jax.local_device_count(), -1, x.shape[-1])


@functools.partial(jax.pmap, axis_name="batch")
def step(w, x):
    return w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0) * w, "batch")


def rows_per_device(x):
    return shard(x).shape[1]


def run():
    n = jax.local_device_count()
    w = jnp.stack([jnp.ones(3, jnp.float32)] * n)
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3)
    w = step(w, shard(x))
    return {"w": np.asarray(w[0]), "rows": np.asarray(rows_per_device(x))}
