"""Calls that leave a defaulted parameter to its default: pmap calls the function with the
given arguments only, so the default is the same constant on every device. The jitted def takes
the given parameters; the body keeps its default."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _scaled_mean(x, scale=2.0):
    return jax.lax.pmean(jnp.mean(x) * scale, "i")


@jax.jit
def scaled_mean(x):
    return jax.shard_map(
        _scaled_mean, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32)
    first = scaled_mean(x)
    second = scaled_mean(x + 1.0)
    return {"first": np.asarray(first), "second": np.asarray(second)}
