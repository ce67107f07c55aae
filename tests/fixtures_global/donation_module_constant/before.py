"""A module constant replicated for a donating step: the original's replicas are copies, so W
survives the donation. The migration places a copy of W (device_put of W itself, even with
may_alias=False, reuses W's buffer on its device and the step would delete it)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np

W = jnp.ones((3,), jnp.float32)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def step(params, x):
    return params + jax.lax.pmean(x, "batch")


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(W, jax.local_devices())
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    params = step(params, x)
    return {"out": np.asarray(params[0]), "w_after": np.asarray(W)}
