"""PM608: run() also calls a helper whose pmap stays faithful; that code must not run under
run()'s mesh, so run() and its step stay faithful too."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _first_replica(x):
    """`x[0]` for host transfer, without a cross-device gather.

    On an array split over devices along its leading axis (a pmap output, or the jit +
    shard_map output that replaces it), `x[0]` compiles a gather with an all-reduce and
    returns a copy on every device; the device holding row 0 already has it, so read that
    shard. Anything else (another layout, a tuple, a NumPy array) gets plain `x[0]`.
    """
    for shard in getattr(x, "addressable_shards", ()):
        start = shard.index[0] if shard.index else None
        if (isinstance(start, slice) and start.start in (0, None)
                and shard.data.shape == (1, *x.shape[1:])):
            return shard.data.squeeze(0)
    return x[0]


# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _pmap_style_shard_map(
    fun, axis_name="_pmap_axis", *, in_specs=None, out_specs=None, static_argnums=(),
    donate_argnums=(), devices=None, backend=None, axis_size=None,
):
    """jax.jit(shard_map(fun)) with jax.pmap's calling contract, as JAX >= 0.8 runs pmap.

    Mapped arguments keep their leading device axis and `fun` sees one device's slice: the
    axis named in each spec is squeezed on the way in and expanded on the way out. Keyword
    arguments are mapped on axis 0. The mesh spans the first n devices, n being the mapped
    size of the first mapped argument, and is built on first call, so importing this module
    does not start a backend. check_vma=False keeps pmap's gradients and unchecked
    out_specs=P(). Static and donated argument numbers are pmap's.
    """
    import functools

    import jax
    import numpy as np

    Spec = jax.sharding.PartitionSpec
    is_spec = lambda s: isinstance(s, Spec)
    kw_spec = Spec(axis_name)
    in_specs = kw_spec if in_specs is None else in_specs
    out_specs = kw_spec if out_specs is None else out_specs
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)

    def axis_of(spec):
        return tuple(spec).index(axis_name) if axis_name in tuple(spec) else None

    def over_axes(op, specs, tree):
        return jax.tree_util.tree_map(
            lambda s, sub: sub if axis_of(s) is None
            else jax.tree_util.tree_map(lambda x: op(x, [axis_of(s)]), sub),
            specs, tree, is_leaf=is_spec)

    def split_static(args):
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        dyn_specs = in_specs
        if static and isinstance(in_specs, tuple) and not is_spec(in_specs):  # P was a tuple < 0.6
            dyn_specs = tuple(s for i, s in enumerate(in_specs) if i not in static)
        return dyn, dyn_specs

    def mapped_size(args, kwargs):
        dyn, dyn_specs = split_static(args)
        sizes = []
        jax.tree_util.tree_map(
            lambda s, sub: sizes.extend(
                x.shape[axis_of(s)] for x in jax.tree_util.tree_leaves(sub)
                if axis_of(s) is not None),
            (dyn_specs, kw_spec), (dyn, kwargs), is_leaf=is_spec)
        if not sizes:
            raise ValueError("pmap requires at least one argument with a mapped axis.")
        if axis_size is not None and axis_size != sizes[0]:
            raise ValueError(
                f"Specified axis_size {axis_size} doesn't match received axis_size {sizes[0]}.")
        return sizes[0]

    # Like pmap, reuse compiled programs across calls of this helper for the same function
    # and arguments (e.g. a pmap site evaluated inside a loop): one cache per key.
    devices = None if devices is None else tuple(devices)
    try:
        def frozen(specs):
            leaves, treedef = jax.tree_util.tree_flatten(specs, is_leaf=is_spec)
            return tuple(leaves), treedef

        key = (fun, axis_name, frozen(in_specs), frozen(out_specs), static, donate, devices,
               backend, axis_size)
        hash(key)
    except TypeError:  # an unhashable function or spec tree: nothing is shared
        key = None
    shared = _pmap_style_shard_map.__dict__.setdefault("compiled", {})
    jitted = shared.get(key) if key is not None else None
    if jitted is None:
        @functools.lru_cache(maxsize=None)
        def jitted(n):
            all_devices = list(devices) if devices is not None else jax.devices(backend)
            mesh = jax.sharding.Mesh(np.array(all_devices[:n]), (axis_name,))

            def run(*args, **kwargs):
                dyn, dyn_specs = split_static(args)

                def per_device(dyn, kwargs):
                    dyn, kwargs = over_axes(jax.lax.squeeze, (dyn_specs, kw_spec), (dyn, kwargs))
                    it = iter(dyn)
                    full = [args[i] if i in static else next(it) for i in range(len(args))]
                    return over_axes(jax.lax.expand_dims, out_specs, fun(*full, **kwargs))

                return jax.shard_map(
                    per_device, mesh=mesh, in_specs=(dyn_specs, kw_spec), out_specs=out_specs,
                    check_vma=False,
                )(dyn, kwargs)

            # Compiled programs (profiles, HLO dumps) carry the mapped function's name, as with pmap.
            run.__name__ = run.__qualname__ = getattr(fun, "__name__", "pmapped")
            return jax.jit(run, static_argnums=static, donate_argnums=donate)

        if key is not None:
            shared[key] = jitted

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return jitted(mapped_size(args, kwargs))(*args, **kwargs)

    call.lower = lambda *args, **kwargs: jitted(mapped_size(args, kwargs)).lower(*args, **kwargs)
    return call


@functools.partial(_pmap_style_shard_map, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def total(values):
    return _pmap_style_shard_map(lambda v: jax.lax.psum(v, "i"), axis_name="i")(values)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jnp.zeros((3,), jnp.float32)
    params = {"w": jnp.stack([w] * n), "b": jnp.stack([jnp.float32(0.0)] * n)}
    x = rng.normal(size=(n, 4, 3)).astype(np.float32)
    y = x @ np.array([1.0, -1.0, 0.5], np.float32)
    params, loss = train_step(params, x, y)
    return {"loss": np.asarray(_first_replica(loss)), "b": np.asarray(params["b"]), "t": np.asarray(total(np.tile(np.ones(2, np.float32), (n, 1))))}
