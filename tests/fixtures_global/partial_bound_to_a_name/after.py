"""The mapped function is a name bound once, in the function that maps it, to a
functools.partial of a module def that binds the axis name by keyword (brax's
`check = functools.partial(is_replicated, axis_name="i")`), read only where it is mapped:
that partial, built once where it is bound, as pmap's own partial argument would be."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def spread(tree, scale, axis_name):
    total = jax.tree_util.tree_map(lambda a: jnp.sum(a) * scale, tree)
    low = jax.lax.pmin(total["w"], axis_name=axis_name)
    high = jax.lax.pmax(total["w"], axis_name=axis_name)
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0), high - low + jax.lax.psum(total["b"], axis_name)
    )


def run():
    mesh = _mesh("i")
    n = jax.local_device_count()
    stacked = {
        "w": jnp.arange(n * 3.0).reshape(n * 3),
        "b": jax.device_put(jnp.ones((2,)), NamedSharding(mesh, P())),
    }
    measure = functools.partial(spread, scale=2.0, axis_name="i")
    out = jax.jit(jax.shard_map(
        measure,
        mesh=_mesh("i"), in_specs=({"w": P("i"), "b": P()},), out_specs=P("i"), check_vma=False,
    ))(stacked)
    return {"spread": np.asarray(out)}
