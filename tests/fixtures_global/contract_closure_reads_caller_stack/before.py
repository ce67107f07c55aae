"""PM605 then PM612: a pmapped closure reads its caller's replicated stack (`w[0]`), whose layout
the global style would change, so the site keeps pmap's calling contract."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def train():
    n = jax.local_device_count()
    w = jnp.stack([jnp.ones(3)] * n)

    @functools.partial(jax.pmap, axis_name="batch")
    def apply(x):
        return x @ w[0]  # reads the caller's replicated stack

    x = np.ones((n, 2, 3), np.float32)
    return apply(x)


def run():
    return {"y": np.asarray(train())}
