"""Template of `_pmap_compat`: jax.pmap's signature, for pmap arguments known only at run time.

Forwarded `*args` / `**kwargs` (project wrappers such as `def my_pmap(f, **kw)`), in_axes held
in variables, and `jax.pmap` passed around as a value whose every use is a call cannot be
translated to specs statically. `_pmap_compat` has jax.pmap's signature (jax 0.4.38: `fun`
required, the rest keyword-only after axis_name) and translates in_axes / out_axes to
PartitionSpecs when pmap would, by the rules of transforms/faithful/specs.py, then hands over to
`_pmap_style_shard_map`. A wrapper migrated this way is faithful for every caller, in every
module, with no change at the callers. Errors are legacy pmap's: a non-callable `fun`, a
non-int leaf or global_arg_shapes raise at once; a list in_axes or a negative axis raise when
the function is called (legacy raised AssertionError for negative axes; new pmap computes a
wrong result, so that is never reproduced).

The same text serves every target. Read as text from the marker comment on (see
transforms/helpers/helper_templates.py); the import below is for the tests that run this file.
"""

from transforms.templates.pmap_style_shard_map import _pmap_style_shard_map


# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _pmap_compat(
    fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
    backend=None, axis_size=None, donate_argnums=(), global_arg_shapes=None,
):
    """jax.pmap's signature on _pmap_style_shard_map, for pmap arguments known only at run time.

    in_axes / out_axes become PartitionSpecs as pmap-migrate translates literals: None ->
    P(), k -> P(None, ..., None, axis_name) with k Nones, containers kept. Errors are legacy
    pmap's: a non-callable fun or a non-int leaf raise here, a list in_axes or a negative
    axis when the function is called.
    """
    import jax

    if global_arg_shapes is not None:
        raise ValueError(
            "global_arg_shapes only worked with sharded_jit which has long been removed from "
            "JAX. Please migrate to pjit and remove global_arg_shapes from pmap.")
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")
    for what, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
        if not all(type(leaf) is int for leaf in jax.tree_util.tree_leaves(axes)):
            raise TypeError(
                f"pmap {what} must be an int, None, or (nested) container with those types "
                f"as leaves, but got {axes}.")
    leaves = jax.tree_util.tree_leaves((in_axes, out_axes))
    if isinstance(in_axes, list) or any(leaf < 0 for leaf in leaves):
        def refuse(*args, **kwargs):
            if isinstance(in_axes, list):
                raise ValueError(
                    f"pmap in_axes must be a tuple prefix of the positional arguments, not a "
                    f"list: {in_axes}")
            raise AssertionError(f"pmap never supported negative axes: {in_axes}, {out_axes}")

        refuse.lower = refuse
        return refuse

    name = "_pmap_axis" if axis_name is None else axis_name
    Spec = jax.sharding.PartitionSpec

    def specs(axes):
        return jax.tree_util.tree_map(
            lambda k: Spec() if k is None else Spec(*[None] * k, name), axes,
            is_leaf=lambda x: x is None)

    return _pmap_style_shard_map(
        fun, name, in_specs=specs(in_axes), out_specs=specs(out_axes),
        static_argnums=static_broadcasted_argnums, donate_argnums=donate_argnums,
        devices=devices, backend=backend, axis_size=axis_size)
