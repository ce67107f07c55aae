"""Stacked transforms: `@jax.jit` above a pmap decorator, a `@jax.jit` function under
the pmap decorator, and `jax.jit(jax.pmap(f, axis_name="i"))` built and called.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
@functools.partial(jax.pmap, axis_name="i")
def jit_over_pmap(x):
    return x / jax.lax.psum(jnp.sum(x), "i")


@functools.partial(jax.pmap, axis_name="i")
@jax.jit
def pmap_over_jit(x):
    # The inner jit is traced inside the pmap, so the axis name is still bound.
    return jnp.cumsum(x) - jax.lax.pmean(jnp.mean(x), "i")


@jax.jit
def gelu_inner(x):
    return jax.nn.gelu(x, approximate=True)


def block(x):
    h = gelu_inner(x)
    return h + jax.lax.pmax(h, "i")


def run():
    n = jax.local_device_count()
    x = np.linspace(0.1, 1.0, n * 3, dtype=np.float32).reshape(n, 3)

    a = jit_over_pmap(x)
    b = pmap_over_jit(x)
    jitted_block = jax.jit(jax.pmap(block, axis_name="i"))
    c = jitted_block(x)
    # Calling the jitted wrapper twice reuses the compiled computation.
    d = jitted_block(x + 1.0)

    return {
        "jit_over_pmap": np.asarray(a),
        "pmap_over_jit": np.asarray(b),
        "jit_pmap_block": np.asarray(c),
        "jit_pmap_block_2": np.asarray(d),
    }
