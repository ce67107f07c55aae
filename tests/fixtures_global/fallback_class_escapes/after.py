"""PM609: the instance is handed to another function, where its methods may be called with
layouts the tool does not see: the class stays faithful."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


class Summer:
    def __init__(self):
        self._total = jax.jit(
            _per_device_shard_map(
                lambda x: jax.lax.psum(x, "i"), "i", in_specs=P("i"), out_specs=P("i")
            )
        )

    def total(self, x):
        return self._total(x)


def report(summer, n):
    return summer.total(jnp.ones((n, 3)))


def run():
    n = jax.local_device_count()
    summer = Summer()
    first = summer.total(np.ones((n, 3), np.float32))
    return {"first": np.asarray(first), "reported": np.asarray(report(summer, n))}
