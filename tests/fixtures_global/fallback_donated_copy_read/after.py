"""PM610: the donated stack is read after the call. pmap donated a copy of the one-device
jnp.stack, so the original's stack survives; a jit would delete it, so run() stays faithful."""
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


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
)
def train_step(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.1 * grads, params)


def run():
    n = jax.local_device_count()
    params = {"w": jnp.stack([jnp.ones((3,), jnp.float32)] * n)}
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    before = params
    params = train_step(params, x)
    return {"before": np.asarray(before["w"]), "after": np.asarray(params["w"][0])}
