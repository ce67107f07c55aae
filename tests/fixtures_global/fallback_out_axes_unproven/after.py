"""PM606: out_axes=(0, None) whose None result is not provably the same on every device
(out_specs=P() would silently return device 0's value): the site stays faithful."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _pmap_style_shard_map


def local_stats(x):
    return x - jnp.mean(x), jnp.mean(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    centered, mean = _pmap_style_shard_map(local_stats, axis_name="i", out_specs=(P("i"), P()))(x)
    return {"centered": np.asarray(centered), "mean": np.asarray(mean)}
