"""A caller of a nested pmap and of a 1-D step: the nested pmap goes global over its 2-D mesh,
taking pmap's rows, so the caller keeps them and the 1-D step stays on pmap's contract (PM612,
naming the nested pmap); values pass between the two in pmap's layout, as in the original."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P, AxisType
from _pmap_helpers import _per_device_shard_map


@jax.jit
@functools.partial(_per_device_shard_map, axis_name="i", in_specs=P("i"), out_specs=P("i"))
def scale(x):
    return x * 2.0 / lax.psum(x.sum(), "i")


@functools.cache
def _grid_mesh(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return jax.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:rows * cols]
    )


def _grid(x):
    return lax.psum(x, "cols") + lax.axis_index("rows")


@jax.jit
def grid(x):
    def per_device(x):
        _squeeze = lambda tree, axes: jax.tree.map(lambda a: jax.lax.squeeze(a, axes), tree)
        _expand = lambda tree, axes: jax.tree.map(lambda a: jax.lax.expand_dims(a, axes), tree)
        x = _squeeze(x, (0, 1))
        return _expand(_grid(x), (0, 1))

    return jax.shard_map(
        per_device, mesh=_grid_mesh(jax.numpy.shape(jax.tree.leaves(x)[0])[:2], ("rows", "cols")),
        in_specs=(P("rows", "cols"),), out_specs=P("rows", "cols"), check_vma=False,
    )(x)


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape((n, 3)) + 1.0
    y = scale(x)
    g = grid(y.reshape((n // 2, 2, 3)))
    z = scale(g.reshape((n, 3)))
    return {"y": np.asarray(y), "g": np.asarray(g), "z": np.asarray(z)}
