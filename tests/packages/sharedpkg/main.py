# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np

from sharedpkg.steps import step, demo


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.arange(3.0), jax.local_devices())
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n, 2, 3)
    out = step(params, x)
    return {"out": np.asarray(out), "demo": np.asarray(demo())}
