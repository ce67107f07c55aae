"""pmap built in the calling function: assigned to a local name, called on the spot, and of a functools.partial callee."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def step(w, x, lr):
    return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), "d")


def run():
    n = jax.local_device_count()
    x = np.linspace(0.0, 1.0, n * 4 * 2, dtype=np.float32).reshape(n, 4, 2)
    mean = jax.pmap(lambda v: jax.lax.pmean(jnp.mean(v), "d"), axis_name="d")
    m = mean(x)
    doubled = jax.pmap(lambda v: v * 2)(x)
    p_step = jax.pmap(functools.partial(step, lr=0.5), axis_name="d")
    w = p_step(jnp.zeros((n, 2)), x)
    return {"m": np.asarray(m[0]), "doubled": np.asarray(doubled), "w": np.asarray(w[0])}
