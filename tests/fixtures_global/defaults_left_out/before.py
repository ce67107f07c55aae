"""Calls that leave a defaulted parameter to its default: pmap calls the function with the
given arguments only, so the default is the same constant on every device. The jitted def takes
the given parameters; the body keeps its default."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def scaled_mean(x, scale=2.0):
    return jax.lax.pmean(jnp.mean(x) * scale, "i")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    first = scaled_mean(x)
    second = scaled_mean(x + 1.0)
    return {"first": np.asarray(first[0]), "second": np.asarray(second)}
