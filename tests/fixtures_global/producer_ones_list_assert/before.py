"""A device sync as big_vision and brax write it: one per device from `jnp.ones([n])` (a list
shape), psummed, and the result checked with an assert and a raise on the host."""
import jax
import jax.numpy as jnp
import numpy as np


def _sync(x):
    return jax.lax.psum(x, "i")


def sync():
    x = jnp.ones([jax.local_device_count()])
    x = jax.device_get(jax.pmap(_sync, "i")(x))
    assert x[0] == jax.device_count(), f"sync saw {x[0]} devices"
    if x[0] < 1:
        raise RuntimeError(f"no devices: {x[0]}")
    return x[0]


def run():
    return {"count": np.asarray(sync())}
