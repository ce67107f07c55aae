"""A value flows from a site of one axis name to a site of another, and is donated there: the
two meshes have the same devices in the same order, so P("i") on one is P("j") on the other."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def centered(x):
    return x - jax.lax.pmean(x, "i")


@functools.partial(jax.pmap, axis_name="j", donate_argnums=(0,))
def scaled(x, w):
    return x * w / (jax.lax.pmax(jnp.max(jnp.abs(x)), "j") + 1.0)


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    w = jax.device_put_replicated(jnp.float32(2.0), jax.local_devices())
    c = centered(x)
    for _ in range(2):
        c = scaled(c, w)
        c = centered(c)
    return {"c": np.asarray(c), "w": np.asarray(w[0])}
