"""PM602: devices= a sub-list runs the site on fewer devices than the caller's mesh (it keeps
pmap's contract on those devices, PM612), and backend= picks a platform: it stays faithful."""
import jax
import jax.numpy as jnp
import numpy as np


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


def half_rms():
    n = jax.local_device_count()
    k = max(1, n // 2)
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return jax.pmap(rms, axis_name="i", devices=jax.local_devices()[:k])(x[:k])


def cpu_rms():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return jax.pmap(rms, axis_name="i", backend="cpu")(x)


def run():
    return {"half": np.asarray(half_rms()), "cpu": np.asarray(cpu_rms())}
