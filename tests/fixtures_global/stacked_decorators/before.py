"""pmap stacked with a bare jax.jit: above it (jit of the new jit is that jit), below it (the
body is a jitted function, traced inside shard_map), and `jax.jit(jax.pmap(f))` built and
called."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
@functools.partial(jax.pmap, axis_name="i")
def normalized(x):
    return x / jax.lax.psum(jnp.sum(x), "i")


@functools.partial(jax.pmap, axis_name="i")
@jax.jit
def centered_total(x):
    return jax.lax.psum(jnp.sum(x - jax.lax.pmean(jnp.mean(x), "i")), "i")


def block(x):
    return x + jax.lax.pmax(x, "i")


def run():
    n = jax.local_device_count()
    x = np.linspace(0.1, 1.0, n * 3, dtype=np.float32).reshape(n, 3)
    jitted_block = jax.jit(jax.pmap(block, axis_name="i"))
    return {
        "normalized": np.asarray(normalized(x)),
        "centered_total": np.asarray(centered_total(x)[0]),
        "block": np.asarray(jitted_block(x)),
        "block_again": np.asarray(jitted_block(x + 1.0)),
    }
