"""devices= every local device and axis_size= the device count are what the global mesh is
already (one process): the options are dropped."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


p_rms_devices = jax.jit(jax.shard_map(
    rms,
    in_specs=(P("i"),), out_specs=P(), check_vma=False,
))
p_rms_sized = jax.jit(jax.shard_map(
    rms,
    in_specs=(P("i"),), out_specs=P(), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 4, dtype=np.float32)
        devices = jax.local_devices()
        return {
            "rms_devices": np.asarray(p_rms_devices(x)),
            "rms_axis_size": np.asarray(p_rms_sized(x)),
        }
