"""The caller of the steps of steps.py."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np

from crosspkg.steps import evaluate, train_step


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.linspace(0.5, 1.5, 3), jax.local_devices())
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10
    for _ in range(3):
        params, loss = train_step(params, x)
    per_device = evaluate(params, x)
    return {"params": np.asarray(params[0]), "loss": np.asarray(loss[0]),
            "per_device": np.asarray(per_device)}
