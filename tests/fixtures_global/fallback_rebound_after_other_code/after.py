"""`step = jax.pmap(step, ...)` at module level with other code between the def and the
rebinding (here a call of the plain def): the site keeps pmap's calling contract, an
assignment evaluated before the name is rebound, and the finding says why."""
import jax
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def step(x):
    return x * 2.0


PLAIN = step(np.float32(1.0))
step = jax.jit(_per_device_shard_map(step, "i", in_specs=P("i"), out_specs=P("i")))


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return {"doubled": np.asarray(step(x)), "plain": np.asarray(PLAIN)}
