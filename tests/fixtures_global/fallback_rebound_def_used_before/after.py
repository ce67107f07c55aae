"""A def rebound to its own pmap, but called once before the rebinding, where the name is
still the plain def: the site keeps pmap's calling contract and the finding names that line."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def train():
    n = jax.local_device_count()

    def double(x):
        return x * 2.0

    plain = double(jnp.ones(3))
    double = jax.jit(_per_device_shard_map(double, "i", in_specs=P("i"), out_specs=P("i")))
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return np.asarray(plain), np.asarray(double(x))


def run():
    plain, doubled = train()
    return {"plain": plain, "doubled": doubled}
