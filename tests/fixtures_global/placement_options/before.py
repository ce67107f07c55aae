"""devices= every local device and axis_size= the device count are what the global mesh is
already (one process): the options are dropped."""
import jax
import jax.numpy as jnp
import numpy as np


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    devices = jax.local_devices()
    p_rms_devices = jax.pmap(rms, axis_name="i", devices=devices)
    p_rms_sized = jax.pmap(rms, axis_name="i", axis_size=n)
    return {
        "rms_devices": np.asarray(p_rms_devices(x)[0]),
        "rms_axis_size": np.asarray(p_rms_sized(x)[0]),
    }
