"""PM604: per-device RNG keys (`jax.random.split(key, n)`, one key per device) have no batch axis to merge the device axis into; the finding names the split and its line."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from _pmap_helpers import _pmap_style_shard_map


@functools.partial(_pmap_style_shard_map, axis_name="d")
def noise(key):
    return jax.random.normal(key, (3,))


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return {"noise": np.asarray(noise(keys))}
