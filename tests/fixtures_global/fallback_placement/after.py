"""PM602: devices= a sub-list runs the site on fewer devices than the caller's mesh (it keeps
pmap's contract on those devices, PM612), and backend= picks a platform: it stays faithful."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from _pmap_helpers import _pmap_style_shard_map


@functools.cache
def _pmap_mesh(size, axis_name, devices=None):
    """The mesh pmap maps an axis of `size` over: `devices` where pmap was given them, else the
    first `size` devices."""
    devices = jax.devices()[:size] if devices is None else list(devices)
    return jax.make_mesh((size,), (axis_name,), devices=devices, axis_types=(AxisType.Auto,))


@functools.lru_cache(maxsize=256)
def _per_device_shard_map(
    function, axis_name, in_specs, out_specs, static_argnums=(), devices=None
):
    """`function` with pmap's calling contract, for jax.jit: shard_map over `devices` (pmap's
    devices=) or else the first n devices, n the leading axis of the mapped arguments (jit
    traces once per n, as pmap compiled once per size). `function` sees one device's row of
    each mapped argument (keyword arguments are mapped too), and its results get the device
    axis back unless out_specs is P(). Cached, so a site built again (in a function, a loop)
    reuses jit's compiled program, as pmap did."""
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
        mesh = _pmap_mesh(leaves[0].shape[0], axis_name, devices)
        return jax.shard_map(one_device, mesh=mesh, in_specs=(specs, P(axis_name)),
                             out_specs=out_specs, check_vma=False)(mapped, kwargs)

    return functools.wraps(function)(call)


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


def half_rms():
    n = jax.local_device_count()
    k = max(1, n // 2)
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return jax.jit(
        _per_device_shard_map(
            rms, "i", in_specs=P("i"), out_specs=P("i"), devices=tuple(jax.local_devices()[:k])
        ),
    )(x[:k])


def cpu_rms():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return _pmap_style_shard_map(rms, axis_name="i", backend="cpu")(x)


def run():
    return {"half": np.asarray(half_rms()), "cpu": np.asarray(cpu_rms())}
