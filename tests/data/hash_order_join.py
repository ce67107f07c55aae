"""Drawn by a differential run of the statement interpreter: two paths join with several
names in conflict, and the migration named a different one first under different string
hash seeds (PYTHONHASHSEED), so its output changed from run to run."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x):
    shift = jax.lax.pmean(jnp.mean(x), "batch")
    total = jax.lax.pmean(jnp.sum(x), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.5 * shift, params), total


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
    params = jnp.stack([np.ones((3,), np.float32)] * n)
    old = params
    total = 0
    if n > 1:
        with open('f') as fh:
            params = jnp.stack([np.ones((3,), np.float32)] * n)
            if n > 1:
                assert n > 0
            old = params
            params, total = train_step(params, x)
        while n > 0:
            y = params + 1
    else:
        for i in range(1):
            while n > 0:
                old = jnp.asarray(params)
                total += 1
                continue
                raise ValueError(old)
            for i in range(2):
                params = jnp.stack([np.ones((3,), np.float32)] * n)
            while n > 0:
                def inner():
                    return params
            d = old.is_deleted()
        for i in range(0):
            acc = []
            if n > 1:
                continue
            print(params)
            y = params + 1
        assert n > 0
        while n > 0:
            del old
    return params
