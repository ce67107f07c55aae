"""PM612 beside PM600: run() calls a helper whose own pmap keeps pmap's calling contract (its
argument's layout is unknown there); run() passes it a plain numpy value, so run() and its
step still go global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


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


def _train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def total(values):
    return jax.jit(
        _per_device_shard_map(
            lambda v: jax.lax.psum(v, "i"), "i", in_specs=P("i"), out_specs=P("i")
        ),
    )(values)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jnp.zeros((3,), jnp.float32)
    params = {"w": jax.device_put(jnp.copy(w), NamedSharding(mesh, P())), "b": jax.device_put(jnp.float32(0.0), NamedSharding(mesh, P()))}
    x = rng.normal(size=(n * 4, 3)).astype(np.float32)
    y = x @ np.array([1.0, -1.0, 0.5], np.float32)
    params, loss = train_step(params, x, y)
    return {"loss": np.asarray(loss), "b": np.asarray(params["b"]), "t": np.asarray(total(np.tile(np.ones(2, np.float32), (n, 1))))}
