"""The mapped function is a name bound once, in the function that maps it, to a
functools.partial of a module def that binds the axis name by keyword (brax's
`check = functools.partial(is_replicated, axis_name="i")`), read only where it is mapped:
that partial, built once where it is bound, as pmap's own partial argument would be."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def spread(tree, scale, axis_name):
    total = jax.tree_util.tree_map(lambda a: jnp.sum(a) * scale, tree)
    low = jax.lax.pmin(total["w"], axis_name=axis_name)
    high = jax.lax.pmax(total["w"], axis_name=axis_name)
    return high - low + jax.lax.psum(total["b"], axis_name)


def run():
    n = jax.local_device_count()
    stacked = {"w": jnp.arange(n * 3.0).reshape(n, 3), "b": jnp.ones((n, 2))}
    measure = functools.partial(spread, scale=2.0, axis_name="i")
    out = jax.pmap(measure, axis_name="i")(stacked)
    return {"spread": np.asarray(out)}
