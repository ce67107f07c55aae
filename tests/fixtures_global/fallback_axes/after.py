"""PM602 / PM604: functions calling sites of two axis names where what a call places cannot name
its own axis's mesh, each kept faithful with a finding naming the line (the other functions
here call them in one line, next to other code or with a multi-line string, which the global
style takes as they are; they stay faithful only because their results go to other callers)."""
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
    out_specs=P(). Static and donated argument numbers are pmap's. A wrong call fails with
    legacy pmap's error, and arrays committed to other devices are moved, as pmap moved them.
    """
    import functools
    import inspect
    import re

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
        """The size pmap maps, read from the arguments, with pmap's checks and messages."""
        dyn, dyn_specs = split_static(args)
        pairs = []
        try:
            jax.tree_util.tree_map(
                lambda s, sub: pairs.append((s, sub)), (dyn_specs, kw_spec), (dyn, kwargs),
                is_leaf=is_spec)
        except ValueError as error:
            raise ValueError(
                f"in_specs (pmap's in_axes) must be a tree prefix of the tuple of arguments "
                f"passed positionally to the pmapped function, but in_specs={dyn_specs} is not "
                f"a prefix of these {len(dyn)} argument(s):\n"
                + re.sub(r"tree_map\w* tree", "pmap in_specs", str(error))) from None
        sizes = []
        for s, sub in pairs:
            axis = axis_of(s)
            for x in [] if axis is None else jax.tree_util.tree_leaves(sub):
                shape = np.shape(x)
                if len(shape) <= axis:
                    raise ValueError(
                        f"pmap was requested to map its argument along axis {axis}, which "
                        f"implies that its rank should be at least {axis + 1}, but is only "
                        f"{len(shape)} (its shape is {shape})")
                sizes.append(shape[axis])
        if not sizes:
            raise ValueError("pmap requires at least one argument with a mapped axis.")
        if len(set(sizes)) > 1:
            raise ValueError("pmap got inconsistent sizes for array axes to be mapped:\n"
                             + ";\n".join(one_per_size(args, kwargs)))
        return sizes[0]

    def one_per_size(args, kwargs):
        """For pmap's message: the first leaf mapped with each size, named as pmap names it."""
        dyn, dyn_specs = split_static(args)
        positions = [i for i in range(len(args)) if i not in static]
        try:
            names = [f"argument {name}" for name in inspect.signature(fun).parameters]
        except (TypeError, ValueError):
            names = []
        first = {}

        def note(prefix, s, sub):
            for leaf_path, x in jax.tree_util.tree_flatten_with_path(sub)[0]:
                part, *path = (*prefix, *leaf_path)
                at = positions[path.pop(0).idx] if part.idx == 0 else None
                name = "kwargs" if at is None else names[at] if at < len(names) else f"args[{at}]"
                size, shape = np.shape(x)[axis_of(s)], ",".join(map(str, np.shape(x)))
                first.setdefault(size, (
                    f"  * one axis had size {size}: axis {axis_of(s)} of {name}"
                    f"{jax.tree_util.keystr(tuple(path))} of type {np.result_type(x)}[{shape}]"))

        jax.tree_util.tree_map_with_path(
            lambda prefix, s, sub: axis_of(s) is None or note(prefix, s, sub),
            (dyn_specs, kw_spec), (dyn, kwargs), is_leaf=is_spec)
        return list(first.values())

    def onto_mesh(mesh, args, kwargs):
        """The arguments, with each array committed to other devices moved onto `mesh` as pmap
        moved it; None when none is (then the error is not about placement)."""
        dyn, dyn_specs = split_static(args)
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
            (dyn_specs, kw_spec), (dyn, kwargs), is_leaf=is_spec)
        it = iter(dyn)
        full = [args[i] if i in static else next(it) for i in range(len(args))]
        return (full, kwargs) if moved else None

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
        def program_on(mesh):
            """`fun` as one jitted shard_map over `mesh`; static and donated numbers are pmap's."""
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

        @functools.lru_cache(maxsize=None)
        def jitted(n):
            if axis_size is not None and axis_size != n:
                raise ValueError(
                    f"Specified axis_size {axis_size} doesn't match received axis_size {n}.")
            all_devices = list(devices) if devices is not None else jax.devices(backend)
            if devices is not None and n != len(devices):
                raise ValueError(
                    f"Leading axis size of input to pmapped function must equal the number of "
                    f"local devices passed to pmap. Got axis_size={n}, num_local_devices="
                    f"{len(devices)}.\n(Local devices available to pmap: "
                    f"{', '.join(str(d) for d in devices)})")
            if n > len(all_devices):
                raise ValueError(
                    f"compiling computation that requires {n} logical devices, but only "
                    f"{len(all_devices)} XLA devices are available (num_replicas={n})")
            mesh = jax.sharding.Mesh(np.array(all_devices[:n]), (axis_name,))
            return program_on(mesh), mesh

        if key is not None:
            shared[key] = jitted

    @functools.wraps(fun)
    def call(*args, **kwargs):
        if devices is not None and not devices:
            raise ValueError("'devices' argument to pmap must be non-empty, or None.")
        program, mesh = jitted(mapped_size(args, kwargs))
        try:
            return program(*args, **kwargs)
        except ValueError:
            # jit refuses arrays committed to other devices; pmap moved them. Anything else
            # is the caller's error, raised as it was.
            placed = onto_mesh(mesh, args, kwargs)
            if placed is None:
                raise
        return program(*placed[0], **placed[1])

    call.lower = lambda *args, **kwargs: jitted(mapped_size(args, kwargs))[0].lower(*args, **kwargs)
    return call


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(jnp.max(x), "j")


def double(x):
    return x * 2


def log_value(x):
    print("logged", x)
    return 0


def log_count(n):
    print("devices", n)
    return n


def in_a_header():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = _pmap_style_shard_map(total, axis_name="i")(x)
    sign = 1.0
    if float(_first_replica(_pmap_style_shard_map(largest, axis_name="j")(x))) > 0:
        sign = -1.0
    return {"t": np.asarray(t), "sign": np.float32(sign)}


def on_one_line():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = _pmap_style_shard_map(total, axis_name="i")(x); m = _pmap_style_shard_map(largest, axis_name="j")(x)
    return np.asarray(t), np.asarray(m)


def ordered_call():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = {
        "t": _pmap_style_shard_map(total, axis_name="i")(x),
        "logged": log_value(3),
        "m": _pmap_style_shard_map(largest, axis_name="j")(x),
    }
    return out


def helper_in_statement():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = {
        "t": _pmap_style_shard_map(total, axis_name="i")(x),
        "logged": log_count(n),
        "m": _pmap_style_shard_map(largest, axis_name="j")(x),
    }
    return out


def multi_line_string():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = _pmap_style_shard_map(total, axis_name="i")(x)
    m, note = _pmap_style_shard_map(largest, axis_name="j")(x), """the largest entry,
    on every device"""
    return np.asarray(t), np.asarray(m)


def nested_calls():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return np.asarray(_pmap_style_shard_map(largest, axis_name="j")(_pmap_style_shard_map(total, axis_name="i")(x)))


p_double = _pmap_style_shard_map(double)


def unnamed_under_two_meshes():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = _pmap_style_shard_map(total, axis_name="i")(p_double(x))
    m = _pmap_style_shard_map(largest, axis_name="j")(p_double(x))
    return np.asarray(t), np.asarray(m)


def run():
    return {
        "in_a_header": in_a_header(),
        "on_one_line": on_one_line(),
        "ordered_call": ordered_call(),
        "helper_in_statement": helper_in_statement(),
        "multi_line_string": multi_line_string(),
        "nested_calls": nested_calls(),
        "unnamed_under_two_meshes": unnamed_under_two_meshes(),
    }
