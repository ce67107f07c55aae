"""PM612 under a jit the user wrote: `jax.jit(jax.pmap(f))` and a bare `@jax.jit` right above
the pmap decorator take the adapter alone (one jit, not two), a bare `@jax.jit` right below it
is dropped, and a donating pmap under the user's jit keeps both jits (pmap's donation inside a
jit's trace donated nothing)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


class Rollout:
    def __init__(self, f):
        self.run = jax.jit(jax.pmap(f, in_axes=(0, None)))
        self.scaled = jax.jit(jax.pmap(f, in_axes=(0, None)), static_argnums=(1,))


def make_steps(scale):
    @jax.jit
    @functools.partial(jax.pmap, axis_name="i")
    def total(x):
        return jax.lax.psum(x * scale, "i")

    @functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
    @jax.jit
    def update(w, x):
        return w - jax.lax.pmean(x, "i")

    @jax.jit
    @functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
    def kept(w):
        return w + jax.lax.psum(w, "i")

    return total, update, kept


def run():
    n = jax.local_device_count()
    rollout = Rollout(lambda x, c: x * c + 1.0)
    x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)
    total, update, kept = make_steps(2.0)
    w = jnp.ones((n, 3))
    w = update(w, x)
    v = jnp.full((n, 2), 3.0)
    out = kept(v)
    return {
        "run": np.asarray(rollout.run(x, 2.0)),
        "scaled": np.asarray(rollout.scaled(x, 3.0)),
        "total": np.asarray(total(x)),
        "w": np.asarray(w),
        "kept": np.asarray(out),
        "kept_input_alive": np.asarray(v.is_deleted()),
    }
