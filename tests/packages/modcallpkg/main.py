"""The caller of the steps of steps.py, which it reaches through the module object."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np

from modcallpkg import steps


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.linspace(0.5, 1.5, 3), jax.local_devices())
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10
    for _ in range(3):
        params, loss = steps.train_step(params, x)
    per_device = steps.evaluate(params, x)
    return {"params": np.asarray(params[0]), "loss": np.asarray(loss[0]),
            "per_device": np.asarray(per_device)}
