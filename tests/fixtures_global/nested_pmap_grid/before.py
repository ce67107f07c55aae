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


@functools.partial(jax.pmap, axis_name="rows")
@functools.partial(jax.pmap, axis_name="cols")
def grid_step(x, scale):
    by_row = x / lax.psum(x.sum(), "rows")
    by_col = lax.pmean(x, "cols") * scale
    total = lax.psum(x, ("rows", "cols"))
    where = lax.axis_index("rows") * 10 + lax.axis_index("cols")
    gathered = lax.all_gather(x[0], "cols")
    return {"by_row": by_row, "by_col": by_col}, total, where, gathered


def run():
    n = jax.local_device_count()
    grid = jnp.arange(n * 3.0).reshape((n // 2, 2, 3)) + 1.0
    scale = jnp.full((n // 2, 2), 0.5)
    parts, total, where, gathered = grid_step(grid, scale)
    small = grid_step(grid[:1], scale[:1])
    return {"by_row": np.asarray(parts["by_row"]), "by_col": np.asarray(parts["by_col"]),
            "total": np.asarray(total), "where": np.asarray(where),
            "gathered": np.asarray(gathered), "small_total": np.asarray(small[1])}
