"""A replicated tuple literal and a list result are sequences: `p[1]` and `out[0]` pick an element, not a device's row."""
# pmap-migrate-test: original needs legacy jax
import functools
import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def step(p, x):
    return [p[0] + jax.lax.psum(jnp.sum(x), "i"), p[1]]


def run():
    n = jax.local_device_count()
    p = jax.device_put_replicated((jnp.arange(3.0), jnp.ones(2)), jax.local_devices())
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = step(p, x)
    return {"a": np.asarray(out[0]), "b": np.asarray(p[1])}
