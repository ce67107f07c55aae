"""Module-level pmap objects: `p_norm = jax.pmap(_norm, axis_name="d")` is created at
import time (no device is touched until it is called in run()), plus a bare `@jax.pmap`.
"""
import jax
import jax.numpy as jnp
import numpy as np


def _norm(x):
    # Global L2 norm over all devices' shards.
    return jnp.sqrt(jax.lax.psum(jnp.sum(x * x), axis_name="d"))


p_norm = jax.pmap(_norm, axis_name="d")


@jax.pmap
def softplus(x):
    return jnp.logaddexp(x, 0.0)


@jax.pmap
def row_stats(x):
    return {"mean": jnp.mean(x), "max": jnp.max(x)}


def run():
    n = jax.local_device_count()
    x = np.linspace(-2.0, 2.0, n * 5, dtype=np.float32).reshape(n, 5)
    norms = p_norm(x)
    sp = softplus(x)
    stats = row_stats(sp)
    return {
        "norm": np.asarray(norms),
        "softplus": np.asarray(sp),
        "mean": np.asarray(stats["mean"]),
        "max": np.asarray(stats["max"]),
    }
