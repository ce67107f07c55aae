"""PM611: per-device RNG keys (`jax.random.split(key, n)`, one key per device) have no batch axis to merge the device axis into, so they keep pmap's stacked layout: in_specs P(axis), squeezed by the body's first statement; the finding names the split and its line."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="d")
def noise(key):
    return jax.random.normal(key, (3,))


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return {"noise": np.asarray(noise(keys))}
