"""Top-level code is a caller like any function: a script (or a notebook, a tutorial) that
drives its steps at module level goes global. Its module-level names are globals, so one
that a function reads keeps the layout the function expects (`scale` reads `factors`, a
replicated stack, and so it stays stacked)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def step(w, x):
    g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
    return w - 0.1 * g


@functools.partial(jax.pmap, axis_name="i")
def scaled(v, factor):
    return v * factor


n = jax.local_device_count()
w = jnp.stack([jnp.zeros((3,))] * n)
rng = np.random.RandomState(0)
for t in range(3):
    x = rng.normal(size=(n, 4, 3))
    w = step(w, x)
final = np.asarray(w[0])

doubled = jax.pmap(lambda v: v * 2)(np.arange(n, dtype=np.float32))
factors = np.stack([np.float32(3.0)] * n)
rows = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
tripled = scaled(rows, factors)


def scale():
    return np.asarray(factors)


def run():
    return {"final": final, "doubled": np.asarray(doubled), "tripled": np.asarray(tripled),
            "factors": scale()}
