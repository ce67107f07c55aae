"""A mapped function with a default, called with every parameter positionally: the default is
never used, so one in_specs tuple describes every call."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("i"), P("i")), out_specs=P(), check_vma=False)
def weighted_mean(x, w=1.0):
    return jax.lax.psum(jnp.sum(x * w), "i") / jax.lax.psum(jnp.sum(w * jnp.ones_like(x)), "i")


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 4, dtype=np.float32).reshape(n * 4)
        w = np.linspace(0.5, 1.5, n * 4, dtype=np.float32).reshape(n * 4)
        return {"mean": np.asarray(weighted_mean(x, w))}
