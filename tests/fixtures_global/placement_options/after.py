"""devices= every local device and axis_size= the device count are what the global mesh is
already (one process): the options are dropped."""
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


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


@jax.jit
def p_rms_devices(x):
    return jax.shard_map(
        rms, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


@jax.jit
def p_rms_sized(x):
    return jax.shard_map(
        rms, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P(), check_vma=False
    )(x)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32)
    devices = jax.local_devices()
    return {
        "rms_devices": np.asarray(p_rms_devices(x)),
        "rms_axis_size": np.asarray(p_rms_sized(x)),
    }
