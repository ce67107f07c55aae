"""PM607: a replicated stack whose value can differ between processes (it reads
jax.process_index()) cannot be placed once with P(): the module keeps the faithful style."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _pmap_style_shard_map(
    fun, axis_name="_pmap_axis", *, in_specs=None, out_specs=None, static_argnums=(),
    donate_argnums=(), devices=None, backend=None, axis_size=None,
):
    """jax.jit(shard_map(fun)) with jax.pmap's calling contract, one process or several.

    Mapped arguments keep their leading device axis and `fun` sees one device's slice: the
    axis named in each spec is squeezed on the way in and expanded on the way out. Keyword
    arguments are mapped on axis 0. check_vma=False keeps pmap's gradients and unchecked
    out_specs=P(). Static and donated argument numbers are pmap's. The mesh is built on first
    call, so importing this module does not start a backend.

    With one process the mesh spans the first n devices (n: the mapped size of the first
    mapped argument) and each call is the jitted program itself. With several processes
    (jax.distributed), as pmap: each process passes its host-local slice (leading axis = its
    local device count), the mesh spans every process's devices grouped by process (global
    size n * process_count), collectives span all of them, inputs are made global and outputs
    host-local again around each call, `.lower(...).compile()(...)` included.
    """
    import functools

    import jax
    import numpy as np
    from jax.experimental import multihost_utils

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

    def with_static(args, dyn):
        it = iter(dyn)
        return tuple(args[i] if i in static else next(it) for i in range(len(args)))

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
        return sizes[0]

    def mesh_devices(n, processes, traced):
        """pmap's devices: `devices`, else all processes' devices grouped by process."""
        if traced:  # called while tracing (under jit): this process's devices, as pmap does
            return jax.local_devices(backend=backend)[:n]
        size = axis_size if axis_size is not None else n * processes
        if devices is not None:
            found = list(devices)
        elif processes > 1:
            found = [d for p in range(processes) for d in jax.local_devices(p, backend)]
        else:
            found = jax.devices(backend)
        return found[:size]

    def is_traced(args, kwargs):
        leaves = jax.tree_util.tree_leaves((split_static(args)[0], kwargs))
        return bool(leaves) and isinstance(leaves[0], jax.core.Tracer)

    def host_local(jitted, mesh, n):
        """`jitted` on global arrays, called with and returning host-local ones."""
        def to_global(args, kwargs):
            dyn, dyn_specs = split_static(args)
            dyn, kwargs = jax.tree_util.tree_map(
                lambda x: x if isinstance(x, jax.Array) else np.asarray(x), (dyn, kwargs))
            dyn, kwargs = multihost_utils.host_local_array_to_global_array(
                (dyn, kwargs), mesh, (dyn_specs, kw_spec))
            return with_static(args, dyn), kwargs

        def to_abstract_global(args, kwargs):
            """ShapeDtypeStructs of the global arguments, for lowering from shapes alone."""
            dyn, dyn_specs = split_static(args)
            scale = mesh.devices.size // mesh.local_mesh.devices.size

            def grown(spec, tree):
                def one(x):
                    shape = list(np.shape(x))
                    if axis_of(spec) is not None:
                        shape[axis_of(spec)] *= scale
                    sharding = jax.sharding.NamedSharding(mesh, spec)
                    return jax.ShapeDtypeStruct(tuple(shape), x.dtype, sharding=sharding)
                return jax.tree_util.tree_map(one, tree)

            dyn, kwargs = jax.tree_util.tree_map(
                grown, (dyn_specs, kw_spec), (dyn, kwargs), is_leaf=is_spec)
            return with_static(args, dyn), kwargs

        def to_host_local(out):
            return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)

        class Compiled:
            def __init__(self, compiled):
                self._compiled = compiled

            def __call__(self, *args, **kwargs):
                global_args, global_kwargs = to_global(args, kwargs)
                out = to_host_local(self._compiled(*global_args, **global_kwargs))
                free_donated(args)
                return out

            def __getattr__(self, name):  # as_text, cost_analysis, ...
                return getattr(self._compiled, name)

        class Lowered:
            def __init__(self, lowered):
                self._lowered = lowered

            def compile(self, *args, **kwargs):
                return Compiled(self._lowered.compile(*args, **kwargs))

            def __getattr__(self, name):  # as_text, compiler_ir, ...
                return getattr(self._lowered, name)

        def free_donated(args):
            """A donated input spread over this process's devices that had to be copied to
            become global (e.g. a PmapSharding array on jax < 0.10) is deleted, as pmap
            consumed it; one on a single device stays, as legacy pmap left it."""
            local = set(mesh.local_mesh.devices.flat)
            for x in jax.tree_util.tree_leaves([args[i] for i in donate if i < len(args)]):
                if (isinstance(x, jax.Array) and not x.is_deleted() and len(local) > 1
                        and set(x.sharding.device_set) == local):
                    x.delete()

        def call(*args, **kwargs):
            if is_traced(args, kwargs):  # under jit: this process's devices, as pmap does
                return program(n, traced=True)(*args, **kwargs)
            global_args, global_kwargs = to_global(args, kwargs)
            out = to_host_local(jitted(*global_args, **global_kwargs))
            free_donated(args)
            return out

        def lower(*args, **kwargs):
            if is_traced(args, kwargs):
                return program(n, traced=True).lower(*args, **kwargs)
            leaves = jax.tree_util.tree_leaves((split_static(args)[0], kwargs))
            if any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves):
                args, kwargs = to_abstract_global(args, kwargs)
            else:
                args, kwargs = to_global(args, kwargs)
            return Lowered(jitted.lower(*args, **kwargs))

        call.lower = lower
        return call

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
    program = shared.get(key) if key is not None else None
    if program is None:
        @functools.lru_cache(maxsize=None)
        def program(n, traced=False):
            processes = jax.process_count(backend)
            if processes == 1 and axis_size is not None and axis_size != n:
                raise ValueError(
                    f"Specified axis_size {axis_size} doesn't match received axis_size {n}.")
            mesh = jax.sharding.Mesh(
                np.array(mesh_devices(n, processes, traced)), (axis_name,))

            def run(*args, **kwargs):
                dyn, dyn_specs = split_static(args)

                def per_device(dyn, kwargs):
                    dyn, kwargs = over_axes(jax.lax.squeeze, (dyn_specs, kw_spec), (dyn, kwargs))
                    full = with_static(args, dyn)
                    return over_axes(jax.lax.expand_dims, out_specs, fun(*full, **kwargs))

                return jax.shard_map(
                    per_device, mesh=mesh, in_specs=(dyn_specs, kw_spec), out_specs=out_specs,
                    check_vma=False,
                )(dyn, kwargs)

            # Compiled programs (profiles, HLO dumps) carry the mapped function's name, as with pmap.
            run.__name__ = run.__qualname__ = getattr(fun, "__name__", "pmapped")
            jitted = jax.jit(run, static_argnums=static, donate_argnums=donate)
            if processes == 1 or traced:
                return jitted  # one process: nothing is added to a call
            return host_local(jitted, mesh, n)

        if key is not None:
            shared[key] = program

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return program(mapped_size(args, kwargs))(*args, **kwargs)

    call.lower = lambda *args, **kwargs: program(mapped_size(args, kwargs)).lower(*args, **kwargs)
    return call


@functools.partial(_pmap_style_shard_map, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    offset = float(jax.process_index())
    params = {"w": jnp.stack([jnp.ones(3) + offset] * n), "b": jnp.stack([jnp.zeros(())] * n)}
    x = np.random.RandomState(0).normal(size=(n, 2, 3)).astype(np.float32)
    params, loss = train_step(params, x, x.sum(axis=-1))
    return {"loss": np.asarray(loss)}
