"""out_axes=None: return a psum-reduced (replicated) value without a device axis.

Also a tuple out_axes=(0, None) mixing a per-device and a replicated output.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i", out_axes=None)
def global_sum(x):
    return jax.lax.psum(jnp.sum(x), "i")


def normalize(x):
    total = jax.lax.psum(jnp.sum(x), "i")
    count = jax.lax.psum(x.shape[0], "i")
    mean = total / count
    return x - mean, mean


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)

    total = global_sum(x)

    p_normalize = jax.pmap(normalize, axis_name="i", out_axes=(0, None))
    centered, mean = p_normalize(x)

    p_stats = jax.pmap(
        lambda v: (jax.lax.pmax(jnp.max(v), "i"), jax.lax.pmin(jnp.min(v), "i")),
        axis_name="i",
        out_axes=None,
    )
    hi, lo = p_stats(x)

    return {
        "total": np.asarray(total),
        "centered": np.asarray(centered),
        "mean": np.asarray(mean),
        "max": np.asarray(hi),
        "min": np.asarray(lo),
    }
