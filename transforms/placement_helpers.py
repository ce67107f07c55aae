"""Drop-in replacements for `jax.device_put_replicated` / `jax.device_put_sharded` (removed in
JAX 0.10), written into the user's module by `transforms.placement`.

They are text, not importable code, because the transform layer never imports JAX, and the
emitted code must not import this tool. One text serves every target: it uses only APIs that
exist in JAX 0.4.38 and 0.10 (`NamedSharding`, `jax.sharding.PartitionSpec`, never `jax.P`,
`jax.make_array_from_single_device_arrays`, `jax.dtypes.result_type(...,
return_weak_type_flag=True)`), and imports inside the body so no import is added.

What they reproduce, checked against jax 0.4.38 on 8 CPU devices (and run on 0.10.2):
- per leaf (`jax.tree_util.tree_map`, so the same tree errors), one buffer of shape
  (1, *leaf.shape) per device, assembled along a new leading axis over `devices`, in order;
  a numpy leaf is sent from a view, never stacked N times on the host;
- dtypes canonicalised as device_put does (float64 -> float32 without x64); Python scalars and
  weak jax arrays stay weakly typed. make_array_from_single_device_arrays always drops
  weak_type, so a weak leaf (in practice a scalar: a step counter, a learning rate) is
  broadcast on devices[0] and split by device_put, which keeps it;
- the original's errors and messages: non-sequence or empty `devices`, `shards` not a
  sequence, length mismatch, shards of different shape/dtype/weak type;
- the result is committed and sharded along its leading axis: a migrated pmap consumes it with
  no collective, and donates it (the input is deleted).
The differences: the sharding is a NamedSharding, not a PmapSharding; a PRNG key array from
device_put_sharded has shards of shape (1,), like every other dtype, where the original's were
rank-reduced (shape ()); an error raised by tree_map itself (shards of different structure)
has the installed JAX's wording.
"""

from __future__ import annotations

from transforms.runtime_helper import HELPER_MARKER as _MARKER

REPLICATED = "_device_put_replicated"
SHARDED = "_device_put_sharded"

# The comment above each helper: says where it came from, and tells a second run it is ours.
HELPER_MARKER = f"{_MARKER} (plain JAX, safe to keep; see the pmap-migrate rules reference)"

REPLICATED_SOURCE = f'''\
{HELPER_MARKER}
def {REPLICATED}(x, devices):
    """jax.device_put_replicated, removed in JAX 0.10: each leaf of `x` stacked along a new
    leading axis, one copy on each of `devices`, ready for a pmap-style function."""
    import collections.abc

    import jax
    import numpy as np

    if not isinstance(devices, collections.abc.Sequence) or not devices:
        raise ValueError(
            "`devices` argument to `device_put_replicated must be a non-empty sequence.")
    axis = "{REPLICATED}"
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices), (axis,)), jax.sharding.PartitionSpec(axis))

    def put(leaf):
        if isinstance(leaf, (np.ndarray, jax.Array)):
            one = leaf[None]
        else:  # a Python or numpy scalar: device_put decides its (weak) type
            one = jax.device_put(leaf, devices[0])[None]
        shape = (len(devices),) + tuple(one.shape[1:])
        if jax.dtypes.result_type(one, return_weak_type_flag=True)[1]:
            # Weakly typed (Python scalars): keep it so, as the original did.
            one = jax.device_put(one, devices[0])
            return jax.device_put(jax.numpy.broadcast_to(one, shape), sharding)
        return jax.make_array_from_single_device_arrays(
            shape, sharding, [jax.device_put(one, d) for d in devices])

    return jax.tree_util.tree_map(put, x)
'''

SHARDED_SOURCE = f'''\
{HELPER_MARKER}
def {SHARDED}(shards, devices):
    """jax.device_put_sharded, removed in JAX 0.10: leaf k of shards[k] on devices[k], each
    leaf stacked along a new leading axis, ready for a pmap-style function."""
    import collections.abc

    import jax
    import numpy as np

    if not isinstance(shards, collections.abc.Sequence):
        raise TypeError(
            f"device_put_sharded `shards` input must be a sequence; got {{type(shards)}}")
    if len(shards) != len(devices):
        raise ValueError(
            f"len(shards) = {{len(shards)}} must equal len(devices) = {{len(devices)}}.")
    axis = "{SHARDED}"

    def aval(leaf):
        dtype, weak = jax.dtypes.result_type(leaf, return_weak_type_flag=True)
        dims = ",".join(str(d) for d in np.shape(leaf))
        return f"ShapedArray({{dtype}}[{{dims}}]{{', weak_type=True' if weak else ''}})", weak

    def put(*leaves):
        avals = [aval(leaf) for leaf in leaves]
        for (a1, _), (a2, _) in zip(avals[:-1], avals[1:]):
            if a1 != a2:
                raise ValueError("the shards passed to device_put_sharded must have "
                                 f"consistent shape and dtype, but got {{a1}} and {{a2}}.")
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
'''

SOURCES = {REPLICATED: REPLICATED_SOURCE, SHARDED: SHARDED_SOURCE}
