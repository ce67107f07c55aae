"""Template of `_pmap_style_shard_map`: pmap's contract on jit + shard_map, one process or several.

Every migrated pmap site with literal arguments becomes a call of this helper, with pmap's
arguments in shard_map's words (`in_specs` / `out_specs`). It does what `jax/_src/pmap.py` does
since JAX 0.8 (research R1-R9): a Mesh over the first n devices (n read from the first mapped
argument, as pmap does), rank reduction around the untouched body, `check_vma=False`, and
donation and static arguments on `jax.jit` with pmap's numbering. The mesh is built on the first
call, so importing the migrated module never initialises a JAX backend.

A module gets only what its sites use: each `# pmap-migrate: if FEATURE` block below is emitted
for a module whose sites need FEATURE (transforms/helpers/helper_features.py decides), the
`else` branch, or nothing, for the others. The features:

- `static`: static_broadcasted_argnums (jit's static_argnums, pmap's numbering);
- `donate`: donate_argnums;
- `devices`: the devices / backend / axis_size options and pmap's checks of them;
- `committed`: arrays committed to other devices moved onto the mesh, as pmap moved them;
- `multiprocess`: pmap's multi-process contract (research §2.2 items 8-9, §6), as
  `jax/_src/pmap.py` runs it when `jax.process_count() > 1`: a mesh over every process's devices
  grouped by process (global size = local size x process_count), host-local -> global on the
  way in and global -> host-local on the way out (multihost_utils), donation on the jit of the
  global arrays, and `.lower(...).compile()(...)` converting too (which the new pmap skips). With
  one process that variant's program is the plain `jax.jit` object.

A block may need several (`if multiprocess and committed`). Keyword arguments, pmap's argument
checks and messages, the compile cache and `.lower` are in every variant. A helper module
(`--helper-module`) holds the variant with every feature, which serves every module.

Read as text by transforms/helpers/helper_templates.py, from the marker comment to the end, never
imported by the transform path. The `# pmap-migrate: if target >= ...` block is the one spelling
that depends on the target JAX (public `jax.shard_map(check_vma=False)` from 0.6.1,
`jax.experimental.shard_map`'s `check_rep=False` before). Importing this file runs the first
branch of each block (current JAX, every feature); the tests also run the emitted texts.
"""

# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _pmap_style_shard_map(
    fun, axis_name="_pmap_axis", *, in_specs=None, out_specs=None,
    # pmap-migrate: if static
    static_argnums=(),
    # pmap-migrate: end
    # pmap-migrate: if donate
    donate_argnums=(),
    # pmap-migrate: end
    # pmap-migrate: if devices
    devices=None, backend=None, axis_size=None,
    # pmap-migrate: end
):
    # pmap-migrate: if multiprocess
    """jax.jit(shard_map(fun)) with jax.pmap's calling contract, one process or several:
    `fun` sees one device's slice of each mapped argument (keyword arguments: axis 0), with
    check_vma=False. One process: the mesh is the first n devices (n: the mapped size).
    Several (jax.distributed), as pmap: each process passes its host-local slice, the mesh
    spans every process's devices grouped by process, and arguments are made global and
    results host-local again around each call, `.lower(...).compile()(...)` included."""
    # pmap-migrate: else
    """jax.jit(shard_map(fun)) with jax.pmap's calling contract, as JAX >= 0.8 runs pmap:
    `fun` sees one device's slice of each mapped argument (keyword arguments: axis 0), with
    check_vma=False, on a mesh of the first n devices (n: the mapped size)."""
    # pmap-migrate: end
    import functools
    import inspect
    import re

    import jax
    import numpy as np
    # pmap-migrate: if multiprocess
    from jax.experimental import multihost_utils
    # pmap-migrate: end

    P = jax.sharding.PartitionSpec
    is_spec = lambda s: isinstance(s, P)
    axis_of = lambda spec: tuple(spec).index(axis_name) if axis_name in tuple(spec) else None
    in_specs = P(axis_name) if in_specs is None else in_specs
    out_specs = P(axis_name) if out_specs is None else out_specs
    specs = (in_specs, P(axis_name))  # of (positional arguments, keyword arguments)
    jit_options = {}  # jit sees every argument, so pmap's argument numbers are jit's
    # pmap-migrate: if donate
    jit_options["donate_argnums"] = (
        (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums))
    # pmap-migrate: end
    # pmap-migrate: if devices
    devices = None if devices is None else tuple(devices)
    # pmap-migrate: end
    # pmap-migrate: if not static
    dynamic = lambda args: (args, specs)  # what shard_map gets, and its specs
    with_static = lambda args, dyn: dyn
    # pmap-migrate: end
    # pmap-migrate: if static
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    jit_options["static_argnums"] = static

    def dynamic(args):
        """What shard_map gets (the arguments but the static ones), and its specs."""
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        if static and isinstance(in_specs, tuple) and not is_spec(in_specs):  # P was a tuple < 0.6
            return dyn, (tuple(s for i, s in enumerate(in_specs) if i not in static), specs[1])
        return dyn, specs

    def with_static(args, dyn):
        it = iter(dyn)
        return tuple(args[i] if i in static else next(it) for i in range(len(args)))
    # pmap-migrate: end

    def over_axes(op, specs, tree):  # op(x, [axis]) on every leaf of `tree` a spec maps
        return jax.tree_util.tree_map(
            lambda s, sub: sub if axis_of(s) is None
            else jax.tree_util.tree_map(lambda x: op(x, [axis_of(s)]), sub),
            specs, tree, is_leaf=is_spec)

    def mapped_size(args, kwargs):  # what pmap maps; a wrong call gets legacy pmap's error
        dyn, dyn_specs = dynamic(args)
        mapped = []  # (path, axis, leaf) of every mapped leaf
        note = lambda path, s, sub: axis_of(s) is None or mapped.extend(
            (path + leaf_path, axis_of(s), x)
            for leaf_path, x in jax.tree_util.tree_flatten_with_path(sub)[0])
        try:
            jax.tree_util.tree_map_with_path(note, dyn_specs, (dyn, kwargs), is_leaf=is_spec)
        except ValueError as error:
            raise ValueError(
                f"in_specs (pmap's in_axes) must be a tree prefix of the tuple of arguments "
                f"passed positionally to the pmapped function, but in_specs={dyn_specs[0]} is "
                f"not a prefix of these {len(dyn)} argument(s):\n"
                + re.sub(r"tree_map\w* tree", "pmap in_specs", str(error))) from None
        first = {}  # mapped size -> the first leaf mapped with it
        for path, axis, x in mapped:
            if np.ndim(x) <= axis:
                raise ValueError(
                    f"pmap was requested to map its argument along axis {axis}, which implies "
                    f"that its rank should be at least {axis + 1}, but is only {np.ndim(x)} "
                    f"(its shape is {np.shape(x)})")
            first.setdefault(np.shape(x)[axis], (path, axis, x))
        if not first:
            raise ValueError("pmap requires at least one argument with a mapped axis.")
        if len(first) > 1:
            raise ValueError("pmap got inconsistent sizes for array axes to be mapped:\n"
                             + ";\n".join(
                f"  * one axis had size {size}: axis {axis} of {pmap_name(args, path)} of type "
                f"{np.result_type(x)}[{','.join(map(str, np.shape(x)))}]"
                for size, (path, axis, x) in first.items()))
        return next(iter(first))

    def pmap_name(args, path):  # as pmap names a leaf: `argument x['w']`, `kwargs['k']`
        if path[0].idx == 1:
            return "kwargs" + jax.tree_util.keystr(path[1:])
        at = dynamic(tuple(range(len(args))))[0][path[1].idx]  # the argument's position
        try:
            name = f"argument {list(inspect.signature(fun).parameters)[at]}"
        except (TypeError, ValueError, IndexError):
            name = f"args[{at}]"
        return name + jax.tree_util.keystr(path[2:])

    # pmap-migrate: if committed
    def onto_mesh(mesh, args, kwargs):
        """The arguments, with each array committed to other devices moved onto `mesh` as pmap
        moved it; None when none is (then the error is not about placement)."""
        # pmap-migrate: end
        # pmap-migrate: if committed and multiprocess
        if jax.process_count(backend) > 1:
            return None  # host-local arguments are made global on the way in, by multihost_utils
        # pmap-migrate: end
        # pmap-migrate: if committed
        dyn, dyn_specs = dynamic(args)
        moved = []

        def put(s, x):
            target = jax.sharding.NamedSharding(mesh, s)
            try:
                if x.sharding.is_equivalent_to(target, x.ndim):
                    return x
            except Exception:  # not a placed array (numpy, scalar, tracer): jit moves it
                return x
            moved.append(x)
            return jax.device_put(x, target)

        dyn, kwargs = jax.tree_util.tree_map(
            lambda s, sub: jax.tree_util.tree_map(lambda x: put(s, x), sub),
            dyn_specs, (dyn, kwargs), is_leaf=is_spec)
        return (with_static(args, dyn), kwargs) if moved else None

    # pmap-migrate: end
    # pmap-migrate: if multiprocess
    def mesh_devices(n, processes):
        """pmap's devices with several processes: `devices`, else all processes' devices grouped
        by process; `axis_size` is pmap's global size."""
        size = axis_size if axis_size is not None else n * processes
        if devices is not None:
            found = list(devices)
        else:
            found = [d for p in range(processes) for d in jax.local_devices(p, backend)]
        return found[:size]

    def is_traced(args, kwargs):
        leaves = jax.tree_util.tree_leaves((dynamic(args)[0], kwargs))
        return bool(leaves) and isinstance(leaves[0], jax.core.Tracer)

    def host_local(program, mesh, n):
        """`program` on global arrays, called with and returning host-local ones."""
        # Called while tracing (under jit): this process's devices, as pmap does.
        local = program_on(jax.sharding.Mesh(
            np.array(jax.local_devices(backend=backend)[:n]), (axis_name,)))

        def to_global(args, kwargs):
            dyn, dyn_specs = dynamic(args)
            dyn, kwargs = jax.tree_util.tree_map(
                lambda x: x if isinstance(x, jax.Array) else np.asarray(x), (dyn, kwargs))
            dyn, kwargs = multihost_utils.host_local_array_to_global_array(
                (dyn, kwargs), mesh, dyn_specs)
            return with_static(args, dyn), kwargs

        def to_abstract_global(args, kwargs):
            """ShapeDtypeStructs of the global arguments, for lowering from shapes alone."""
            dyn, dyn_specs = dynamic(args)
            scale = mesh.devices.size // mesh.local_mesh.devices.size

            def grown(spec, tree):
                def one(x):
                    shape = list(np.shape(x))
                    if axis_of(spec) is not None:
                        shape[axis_of(spec)] *= scale
                    sharding = jax.sharding.NamedSharding(mesh, spec)
                    return jax.ShapeDtypeStruct(tuple(shape), x.dtype, sharding=sharding)
                return jax.tree_util.tree_map(one, tree)

            dyn, kwargs = jax.tree_util.tree_map(grown, dyn_specs, (dyn, kwargs), is_leaf=is_spec)
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
            donated = jit_options.get("donate_argnums", ())
            for x in jax.tree_util.tree_leaves([args[i] for i in donated if i < len(args)]):
                if (isinstance(x, jax.Array) and not x.is_deleted() and len(local) > 1
                        and set(x.sharding.device_set) == local):
                    x.delete()

        def call(*args, **kwargs):
            if is_traced(args, kwargs):  # under jit: this process's devices, as pmap does
                return local(*args, **kwargs)
            global_args, global_kwargs = to_global(args, kwargs)
            out = to_host_local(program(*global_args, **global_kwargs))
            free_donated(args)
            return out

        def lower(*args, **kwargs):
            if is_traced(args, kwargs):
                return local.lower(*args, **kwargs)
            leaves = jax.tree_util.tree_leaves((dynamic(args)[0], kwargs))
            if any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves):
                args, kwargs = to_abstract_global(args, kwargs)
            else:
                args, kwargs = to_global(args, kwargs)
            return Lowered(program.lower(*args, **kwargs))

        call.lower = lower
        return call

    # pmap-migrate: end
    def program_on(mesh):  # `fun` as one jitted shard_map over `mesh`
        def run(*args, **kwargs):
            dyn, dyn_specs = dynamic(args)

            def per_device(dyn, kwargs):
                dyn, kwargs = over_axes(jax.lax.squeeze, dyn_specs, (dyn, kwargs))
                out = fun(*with_static(args, dyn), **kwargs)
                return over_axes(jax.lax.expand_dims, out_specs, out)

            # pmap-migrate: if target >= 0.6.1
            return jax.shard_map(
                per_device, mesh=mesh, in_specs=dyn_specs, out_specs=out_specs, check_vma=False,
            )(dyn, kwargs)
            # pmap-migrate: else
            from jax.experimental.shard_map import shard_map

            return shard_map(
                per_device, mesh, in_specs=dyn_specs, out_specs=out_specs, check_rep=False,
            )(dyn, kwargs)
            # pmap-migrate: end

        # Compiled programs (profiles, HLO dumps) carry the mapped function's name, as pmap's.
        run.__name__ = run.__qualname__ = getattr(fun, "__name__", "pmapped")
        return jax.jit(run, **jit_options)

    @functools.lru_cache(maxsize=None)
    def jitted(n):  # program and mesh for mapped size n, built on first call (not at import)
        # pmap-migrate: if multiprocess
        processes = jax.process_count(backend)
        if processes > 1:  # pmap's host-local contract around a program over every process
            mesh = jax.sharding.Mesh(np.array(mesh_devices(n, processes)), (axis_name,))
            return host_local(program_on(mesh), mesh, n), mesh
        # pmap-migrate: end
        # pmap-migrate: if not devices
        available = jax.devices()
        # pmap-migrate: end
        # pmap-migrate: if devices
        if axis_size is not None and axis_size != n:
            raise ValueError(
                f"Specified axis_size {axis_size} doesn't match received axis_size {n}.")
        if devices is not None and n != len(devices):
            raise ValueError(
                f"Leading axis size of input to pmapped function must equal the number of "
                f"local devices passed to pmap. Got axis_size={n}, num_local_devices="
                f"{len(devices)}.\n(Local devices available to pmap: "
                f"{', '.join(str(d) for d in devices)})")
        available = list(devices) if devices is not None else jax.devices(backend)
        # pmap-migrate: end
        if n > len(available):
            raise ValueError(
                f"compiling computation that requires {n} logical devices, but only "
                f"{len(available)} XLA devices are available (num_replicas={n})")
        mesh = jax.sharding.Mesh(np.array(available[:n]), (axis_name,))
        return program_on(mesh), mesh

    # pmap-migrate: if cached
    # A site evaluated again (in a function, a loop) reuses the programs compiled for the same
    # function and arguments, as pmap did.
    flat = [jax.tree_util.tree_flatten(s, is_leaf=is_spec) for s in (in_specs, out_specs)]
    key = (fun, axis_name, *[(tuple(leaves), tree) for leaves, tree in flat],
           tuple(jit_options.items()))
    # pmap-migrate: end
    # pmap-migrate: if cached and devices
    key += (devices, backend, axis_size)
    # pmap-migrate: end
    # pmap-migrate: if cached
    try:
        jitted = _pmap_style_shard_map.__dict__.setdefault("compiled", {}).setdefault(key, jitted)
    except TypeError:  # an unhashable function or spec tree: nothing is shared
        pass

    # pmap-migrate: end
    sizes = {}  # (tree structure, leaf shapes) -> mapped size: all that mapped_size reads

    def size_of(args, kwargs):  # mapped_size once per structure and shapes, not per call
        leaves, tree = jax.tree_util.tree_flatten((dynamic(args)[0], kwargs))
        key = (tree, *(np.shape(x) for x in leaves))
        return sizes[key] if key in sizes else sizes.setdefault(key, mapped_size(args, kwargs))

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # pmap-migrate: if devices
        if devices is not None and not devices:
            raise ValueError("'devices' argument to pmap must be non-empty, or None.")
        # pmap-migrate: end
        # pmap-migrate: if committed
        program, mesh = jitted(size_of(args, kwargs))
        try:
            return program(*args, **kwargs)
        except ValueError:
            # jit refuses arrays committed to other devices; pmap moved them. Anything else
            # is the caller's error, raised as it was.
            placed = onto_mesh(mesh, args, kwargs)
            if placed is None:
                raise
        return program(*placed[0], **placed[1])
        # pmap-migrate: else
        program, _ = jitted(size_of(args, kwargs))
        return program(*args, **kwargs)
        # pmap-migrate: end

    call.lower = lambda *args, **kwargs: jitted(size_of(args, kwargs))[0].lower(*args, **kwargs)
    return call
