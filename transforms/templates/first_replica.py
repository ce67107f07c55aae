"""Template of `_first_replica`: `x[0]` for host transfer, without a cross-device gather.

transforms/faithful/unreplicate.py rewrites `float(out[0])` and the like on pmap outputs to
`float(_first_replica(out))`. On anything but an array split along its leading axis it is
exactly `x[0]`, so a wrong guess about `x` cannot change a value.

One text serves every target. Read as text from the marker comment on (see
transforms/helpers/helper_templates.py).
"""

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
