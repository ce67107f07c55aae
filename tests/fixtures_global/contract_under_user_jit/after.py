"""PM612 under a jit the user wrote: `jax.jit(jax.pmap(f))` and a bare `@jax.jit` right above
the pmap decorator take the adapter alone (one jit, not two), a bare `@jax.jit` right below it
is dropped, and a donating pmap under the user's jit keeps both jits (pmap's donation inside a
jit's trace donated nothing)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


class Rollout:
    def __init__(self, f):
        self.run = jax.jit(_per_device_shard_map(
            f, "devices", in_specs=(P("devices"), P()), out_specs=P("devices")
        ))
        self.scaled = jax.jit(_per_device_shard_map(
            f, "devices", in_specs=(P("devices"), P()), out_specs=P("devices")
        ), static_argnums=(1,))


def make_steps(scale):
    @jax.jit
    @functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
    def total(x):
        return jax.lax.psum(x * scale, "i")

    @functools.partial(jax.jit, donate_argnums=(0,))
    @functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
    def update(w, x):
        return w - jax.lax.pmean(x, "i")

    @jax.jit
    @functools.partial(jax.jit, donate_argnums=(0,))
    @functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
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
