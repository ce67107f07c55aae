"""A pmap built and called in a method that returns its result: the method's callers are not
followed, so the value they get keeps pmap's layout (PM605 names the method)."""
import jax
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


class Trainer:
    def run(self, x):
        n = jax.local_device_count()
        double = jax.jit(
            _per_device_shard_map(lambda v: v * 2.0, "i", in_specs=P("i"), out_specs=P("i"))
        )
        return double(np.broadcast_to(x, (n,) + x.shape))


def run():
    return {"y": np.asarray(Trainer().run(np.arange(4.0, dtype=np.float32)))}
