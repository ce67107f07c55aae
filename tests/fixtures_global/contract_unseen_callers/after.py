"""PM612: pmaps the global analysis cannot give global layouts (a factory whose pmap is kept as
a value, a class calling its pmap with a stack passed in, a decorated closure with a static
argument, an inline pmap over 2 of the devices) keep pmap's calling contract without the
helper: jax.jit over _per_device_shard_map, on the first n devices, n the leading axis."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _pmap_mesh(size, axis_name):
    """The mesh pmap maps an axis of `size` over: the first `size` devices."""
    devices = jax.devices()[:size]
    return jax.make_mesh((size,), (axis_name,), devices=devices, axis_types=(AxisType.Auto,))


@functools.lru_cache(maxsize=256)
def _per_device_shard_map(function, axis_name, in_specs, out_specs, static_argnums=()):
    """`function` with pmap's calling contract, for jax.jit: shard_map over the first n devices,
    n the leading axis of the mapped arguments (jit traces once per n, as pmap compiled once
    per size). `function` sees one device's row of each mapped argument (keyword arguments are
    mapped too), and its results get the device axis back unless out_specs is P(). Cached, so
    a site built again (in a function, a loop) reuses jit's compiled program, as pmap did."""
    squeeze = lambda tree: jax.tree.map(lambda x: jax.lax.squeeze(x, (0,)), tree)

    def call(*args, **kwargs):
        static = {i: args[i] for i in static_argnums}
        mapped = tuple(a for i, a in enumerate(args) if i not in static)
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)

        def one_device(mapped, kwargs):
            rows = iter(a if s == P() else squeeze(a) for a, s in zip(mapped, specs))
            every = [static[i] if i in static else next(rows) for i in range(len(args))]
            out = function(*every, **squeeze(kwargs))
            return out if out_specs == P() else jax.tree.map(
                lambda x: jax.lax.expand_dims(x, (0,)), out)

        leaves = jax.tree.leaves(([a for a, s in zip(mapped, specs) if s != P()], kwargs))
        mesh = _pmap_mesh(leaves[0].shape[0], axis_name)
        return jax.shard_map(one_device, mesh=mesh, in_specs=(specs, P(axis_name)),
                             out_specs=out_specs, check_vma=False)(mapped, kwargs)

    return functools.wraps(function)(call)


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
            ),
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
    step = make_step(0.5)
    w = step(jnp.ones((n, 3)), jnp.arange(n * 4 * 3, dtype=jnp.float32).reshape(n, 4, 3))
    b = Buffer()
    s = b.insert(jnp.zeros((n, 2)), jnp.float32(3.0))
    w2, total = train(2, lambda v: v * 2)
    sub = jax.jit(
        _per_device_shard_map(
            lambda v: v * 2, "devices", in_specs=P("devices"), out_specs=P("devices")
        ),
    )(jnp.ones((2, 3)))  # fewer devices than the mesh
    return {
        "w": np.asarray(w),
        "s": np.asarray(s),
        "w2": np.asarray(w2),
        "total": np.asarray(total),
        "sub": np.asarray(sub),
    }
