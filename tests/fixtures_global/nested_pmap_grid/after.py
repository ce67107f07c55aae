"""A nested pmap goes global: two stacked pmap decorators over (rows, cols, ...) arguments are
one jit(shard_map) over the 2-D mesh ("rows", "cols") sized from their two leading axes, with
collectives over "rows", over "cols" and over both keeping their meaning. The same site runs
on a grid of every device and on a smaller one (pmap's nested form needs rows * cols <= the
device count); the callers keep pmap's rows."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _grid_mesh(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return jax.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:rows * cols]
    )


def _grid_step(x, scale):
    by_row = x / lax.psum(x.sum(), "rows")
    by_col = lax.pmean(x, "cols") * scale
    total = lax.psum(x, ("rows", "cols"))
    where = lax.axis_index("rows") * 10 + lax.axis_index("cols")
    gathered = lax.all_gather(x[0], "cols")
    return {"by_row": by_row, "by_col": by_col}, total, where, gathered


@jax.jit
def grid_step(x, scale):
    def per_device(x, scale):
        _squeeze = lambda tree, axes: jax.tree.map(lambda a: jax.lax.squeeze(a, axes), tree)
        _expand = lambda tree, axes: jax.tree.map(lambda a: jax.lax.expand_dims(a, axes), tree)
        x = _squeeze(x, (0, 1))
        scale = _squeeze(scale, (0, 1))
        return _expand(_grid_step(x, scale), (0, 1))

    return jax.shard_map(
        per_device, mesh=_grid_mesh(jax.numpy.shape(jax.tree.leaves(x)[0])[:2], ("rows", "cols")),
        in_specs=(P("rows", "cols"), P("rows", "cols")),
        out_specs=P("rows", "cols"),
        check_vma=False,
    )(x, scale)


def run():
    n = jax.local_device_count()
    grid = jnp.arange(n * 3.0).reshape((n // 2, 2, 3)) + 1.0
    scale = jnp.full((n // 2, 2), 0.5)
    parts, total, where, gathered = grid_step(grid, scale)
    small = grid_step(grid[:1], scale[:1])
    return {"by_row": np.asarray(parts["by_row"]), "by_col": np.asarray(parts["by_col"]),
            "total": np.asarray(total), "where": np.asarray(where),
            "gathered": np.asarray(gathered), "small_total": np.asarray(small[1])}
