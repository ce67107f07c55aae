"""A global nested pmap is called like a function the global style does not follow: only
values the caller leaves as the original had them may reach it. Here the caller hands it the
replicated total of a 1-D step as is (a value whose global form drops pmap's device axis) as
an argument the outer level maps, so the caller keeps pmap's layout (the 1-D step stays on
pmap's contract, PM612 naming the call) and the nested pmap gets the (n, 3) stack the
original gave it."""
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
def total(x):
    return lax.psum(x, "i")


@functools.cache
def _grid_mesh(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return jax.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:rows * cols]
    )


def _grid(x, s):
    return lax.psum(x, "cols") + lax.axis_index("rows") + s


@jax.jit
def grid(x, s, /):
    def per_device(x, s):
        _squeeze = lambda tree, axes: jax.tree.map(lambda a: jax.lax.squeeze(a, axes), tree)
        _expand = lambda tree, axes: jax.tree.map(lambda a: jax.lax.expand_dims(a, axes), tree)
        x = _squeeze(x, (0, 1))
        s = _squeeze(s, (0,))
        return _expand(_grid(x, s), (0, 1))

    return jax.shard_map(
        per_device, mesh=_grid_mesh(jax.numpy.shape(jax.tree.leaves(x)[0])[:2], ("rows", "cols")),
        in_specs=(P("rows", "cols"), P("rows")), out_specs=P("rows", "cols"), check_vma=False,
    )(x, s)


def run():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape((n, 3)) + 1.0
    s = total(x)
    g = grid(jnp.ones((n, 1, 3)), s)
    return {"s": np.asarray(s), "g": np.asarray(g)}
