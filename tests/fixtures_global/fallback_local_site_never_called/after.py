"""A pmap built in a function that never calls it (kept for later, or left over from an edit):
with no call there is no layout to give it, so it keeps pmap's calling contract with a finding
that says so, and the function's other site still goes global. It was an internal error
(a KeyError in the site's usage)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


@jax.jit
def p_sum(x):
    return jax.shard_map(
        lambda x: jax.lax.psum(x, "batch"),
        mesh=_mesh("batch"),
        in_specs=(P("batch"),),
        out_specs=P(),
        check_vma=False,
    )(x)


def run():
    n = jax.local_device_count()
    p_eval = jax.jit(
        _per_device_shard_map(
            lambda x: x * 2.0, "batch", in_specs=P("batch"), out_specs=P("batch")
        )
    )  # never called
    x = np.arange(n * 3, dtype=np.float32)
    total = p_sum(x)
    return {"total": np.asarray(total)}
