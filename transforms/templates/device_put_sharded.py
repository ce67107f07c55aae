"""Template of `_device_put_sharded`: `jax.device_put_sharded`, removed in JAX 0.10.

Leaf k of shards[k] goes to devices[k], each leaf stacked along a new leading axis, with the
original's checks and messages (`shards` not a sequence, length mismatch, shards of different
shape / dtype / weak type) and weak types kept. The differences: the sharding is a
NamedSharding, not a PmapSharding; a PRNG key array gets shards of shape (1,), like every other
dtype, where the original's were rank-reduced (shape ()); an error raised by tree_map itself
(shards of different structure) has the installed JAX's wording.

One text serves every target. Read as text from the marker comment on (see
transforms/helpers/helper_templates.py).
"""

# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)
def _device_put_sharded(shards, devices):
    """jax.device_put_sharded, removed in JAX 0.10: leaf k of shards[k] on devices[k], each
    leaf stacked along a new leading axis, ready for a pmap-style function."""
    import collections.abc

    import jax
    import numpy as np

    if not isinstance(shards, collections.abc.Sequence):
        raise TypeError(
            f"device_put_sharded `shards` input must be a sequence; got {type(shards)}")
    if len(shards) != len(devices):
        raise ValueError(
            f"len(shards) = {len(shards)} must equal len(devices) = {len(devices)}.")
    axis = "_device_put_sharded"

    def aval(leaf):
        dtype, weak = jax.dtypes.result_type(leaf, return_weak_type_flag=True)
        dims = ",".join(str(d) for d in np.shape(leaf))
        return f"ShapedArray({dtype}[{dims}]{', weak_type=True' if weak else ''})", weak

    def put(*leaves):
        avals = [aval(leaf) for leaf in leaves]
        for (a1, _), (a2, _) in zip(avals[:-1], avals[1:]):
            if a1 != a2:
                raise ValueError("the shards passed to device_put_sharded must have "
                                 f"consistent shape and dtype, but got {a1} and {a2}.")
        sharding = jax.sharding.NamedSharding(
            jax.sharding.Mesh(np.array(devices), (axis,)), jax.sharding.PartitionSpec(axis))
        ones = [leaf[None] if isinstance(leaf, (np.ndarray, jax.Array))
                else jax.device_put(leaf, d)[None] for leaf, d in zip(leaves, devices)]
        shape = (len(devices),) + tuple(ones[0].shape[1:])
        if avals[0][1]:  # weakly typed (Python scalars): keep it so, as the original did
            stacked = jax.numpy.concatenate([jax.device_put(o, devices[0]) for o in ones])
            return jax.device_put(stacked, sharding)
        return jax.make_array_from_single_device_arrays(
            shape, sharding, [jax.device_put(o, d) for o, d in zip(ones, devices)])

    return jax.tree_util.tree_map(put, *shards)
