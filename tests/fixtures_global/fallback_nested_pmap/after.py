"""PM602: a nested pmap (pmap of a pmap) would need a 2-D mesh; the global style does not build
one, so it stays faithful (the faithful style's nested helper)."""
import functools

import jax
from jax.sharding import PartitionSpec as P


# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _nested_pmap_shard_map(
    fun, axis_names, *, in_specs=None, out_specs=None, donate_argnums=(), backend=None,
):
    """jax.pmap(jax.pmap(fun, axis_names[1]), axis_names[0]) as one jax.jit(shard_map(fun)).

    JAX >= 0.10 cannot nest pmap, so both levels share one mesh: the first a*b devices
    reshaped (a, b), row-major as legacy pmap placed them, a and b being the sizes the outer
    and the inner level map (from the first argument each maps). Every mesh axis a spec
    names is squeezed on the way in and expanded on the way out; keyword arguments are
    mapped on axis 0 by both levels. check_vma=False keeps pmap's gradients; donated
    argument numbers are the outer pmap's.
    """
    import functools

    import jax
    import numpy as np

    Spec = jax.sharding.PartitionSpec
    is_spec = lambda s: isinstance(s, Spec)
    names = tuple(axis_names)
    kw_spec = Spec(*names)
    in_specs = kw_spec if in_specs is None else in_specs
    out_specs = kw_spec if out_specs is None else out_specs
    donate = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)

    def positions(spec):
        return [i for i, entry in enumerate(tuple(spec)) if entry in names]

    def over_axes(op, specs, tree):
        return jax.tree_util.tree_map(
            lambda s, sub: jax.tree_util.tree_map(lambda x: op(x, positions(s)), sub)
            if positions(s) else sub,
            specs, tree, is_leaf=is_spec)

    def mesh_shape(args, kwargs):
        """The size each level maps, from the arguments, with pmap's checks and messages."""
        pairs, sizes = [], {}
        try:
            jax.tree_util.tree_map(
                lambda s, sub: pairs.append((s, sub)), (in_specs, kw_spec), (args, kwargs),
                is_leaf=is_spec)
        except ValueError as error:
            raise ValueError(
                f"in_specs (the pmaps' in_axes) must be a tree prefix of the tuple of arguments "
                f"passed positionally to the pmapped function, but in_specs={in_specs} is not "
                f"a prefix of these {len(args)} argument(s):\n{error}") from None
        for spec, sub in pairs:
            for x in jax.tree_util.tree_leaves(sub):
                shape = np.shape(x)
                for i, entry in enumerate(tuple(spec)):
                    if entry not in names:
                        continue
                    if len(shape) <= i:
                        raise ValueError(
                            f"pmap was requested to map its argument along axis {i}, which "
                            f"implies that its rank should be at least {i + 1}, but is only "
                            f"{len(shape)} (its shape is {shape})")
                    if sizes.setdefault(entry, shape[i]) != shape[i]:
                        raise ValueError(
                            f"pmap got inconsistent sizes for array axes to be mapped: axis "
                            f"{entry!r} had size {sizes[entry]} and size {shape[i]} (an argument "
                            f"of shape {shape})")
        if len(sizes) < len(names):
            raise ValueError("pmap requires at least one argument with a mapped axis.")
        return tuple(sizes[n] for n in names)

    # As pmap does, reuse compiled programs across calls of this helper for the same function
    # and arguments (a nested site evaluated inside a loop).
    def frozen(specs):
        leaves, treedef = jax.tree_util.tree_flatten(specs, is_leaf=is_spec)
        return tuple(leaves), treedef

    try:
        key = (fun, names, frozen(in_specs), frozen(out_specs), donate, backend)
        hash(key)
    except TypeError:  # an unhashable function or spec tree: nothing is shared
        key = None
    shared = _nested_pmap_shard_map.__dict__.setdefault("compiled", {})
    if key is not None and key in shared:
        jitted = shared[key]
    else:
        jitted = functools.lru_cache(maxsize=None)(lambda shape: compile_for(shape))
        if key is not None:
            shared[key] = jitted

    def compile_for(shape):
        available, needed = len(jax.devices(backend)), int(np.prod(shape))
        if needed > available:
            raise ValueError(
                f"compiling computation that requires {needed} logical devices, but only "
                f"{available} XLA devices are available (num_replicas={needed})")
        devices = jax.devices(backend)[:needed]
        mesh = jax.sharding.Mesh(np.array(devices).reshape(shape), names)

        def run(*args, **kwargs):
            def per_device(args, kwargs):
                args, kwargs = over_axes(jax.lax.squeeze, (in_specs, kw_spec), (args, kwargs))
                return over_axes(jax.lax.expand_dims, out_specs, fun(*args, **kwargs))

            return jax.shard_map(
                per_device, mesh=mesh, in_specs=(in_specs, kw_spec), out_specs=out_specs,
                check_vma=False,
            )(args, kwargs)

        run.__name__ = run.__qualname__ = getattr(fun, "__name__", "pmapped")
        return jax.jit(run, donate_argnums=donate)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        return jitted(mesh_shape(args, kwargs))(*args, **kwargs)

    call.lower = lambda *args, **kwargs: jitted(mesh_shape(args, kwargs)).lower(*args, **kwargs)
    return call


@functools.partial(_nested_pmap_shard_map, axis_names=("data", "model"), in_specs=P("data", "model"), out_specs=P("data", "model"))
def total(x):
    return jax.lax.psum(jax.lax.psum(x, "model"), "data")


def step(x):
    return total(x)
