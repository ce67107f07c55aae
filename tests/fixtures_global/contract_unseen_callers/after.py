"""PM612: pmaps the global analysis cannot give global layouts (a factory whose pmap is kept as
a value in a dict, a class calling its pmap with a stack passed in, a decorated closure with a
static argument, an inline pmap over 2 of the devices) keep pmap's calling contract without
the helper: jax.jit over _per_device_shard_map, on the first n devices, n the leading axis."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def make_step(lr):
    def step(w, x):
        g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
        return w - lr * g
    return jax.jit(
        _per_device_shard_map(step, "i", in_specs=P("i"), out_specs=P("i")),
        donate_argnums=(0,),
    )


class Buffer:
    def __init__(self):
        self._insert = jax.jit(
            _per_device_shard_map(
                self.insert_internal,
                "devices",
                in_specs=(P("devices"), P()),
                out_specs=P("devices"),
            )
        )

    def insert_internal(self, state, value):
        return state + value

    def insert(self, state, value):
        return self._insert(state, value)


def train(n_steps, apply):
    @functools.partial(jax.jit, static_argnums=(2,))
    @functools.partial(
        _per_device_shard_map,
        axis_name="batch",
        in_specs=P("batch"),
        out_specs=P("batch"),
        static_argnums=(2,),
    )
    def epoch(w, x, k):
        for _ in range(k):
            w = w - 0.1 * jax.lax.pmean(x.sum(), "batch")
        return w, jax.lax.psum(x, "batch")
    n = jax.local_device_count()
    w = jnp.zeros((n, 3))
    x = jnp.arange(n * 2.0).reshape(n, 2)
    for _ in range(n_steps):
        w, total = epoch(w, x, 2)
    return apply(w), total


def run():
    n = jax.local_device_count()
    steps = {"sgd": make_step(0.5)}
    w = steps["sgd"](jnp.ones((n, 3)), jnp.arange(n * 4 * 3, dtype=jnp.float32).reshape(n, 4, 3))
    b = Buffer()
    s = b.insert(jnp.zeros((n, 2)), jnp.float32(3.0))
    w2, total = train(2, lambda v: v * 2)
    sub = jax.jit(
        _per_device_shard_map(
            lambda v: v * 2, "devices", in_specs=P("devices"), out_specs=P("devices")
        )
    )(jnp.ones((2, 3)))  # fewer devices than the mesh
    return {
        "w": np.asarray(w),
        "s": np.asarray(s),
        "w2": np.asarray(w2),
        "total": np.asarray(total),
        "sub": np.asarray(sub),
    }
