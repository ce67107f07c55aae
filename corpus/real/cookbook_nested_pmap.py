"""Modelled on the 2-D nested-pmap cells of two JAX notebooks.

Sources: github.com/jax-ml/jax at commit c980dc4e2a8ddc040b4b76ceef5e6a448fcaf6b5
(2024-04-19): cloud_tpu_colabs/Pmap_Cookbook.ipynb (the rows/cols normalisation) and
cloud_tpu_colabs/JAX_demo.ipynb (row/column/total sums). All code here is written anew.

pmap features kept:
- two stacked decorators, `@partial(pmap, axis_name="rows")` over
  `@partial(pmap, axis_name="cols")`, on an (n/2, 2) input; the body reduces with
  `lax.psum` over "rows", over "cols" and over the tuple ("rows", "cols"); two such
  sites, one returning normalised values, one the sums.

Scaled down: inputs are (n/2, 2) as in the notebooks; nothing else to cut.

The original needs jax 0.4.38: on jax 0.10 a pmap called inside another pmap is rejected
(the inner shard_map's mesh does not match the context mesh); the migrated program is what
runs on 0.10. The notebooks' pmap-inside-a-pmap-body cell is in `pmap_in_pmap_grad.py`.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, pmap


@functools.partial(pmap, axis_name="rows")
@functools.partial(pmap, axis_name="cols")
def normalise_grid(x):
    by_row = x / lax.psum(x, "rows")
    by_col = x / lax.psum(x, "cols")
    by_all = x / lax.psum(x, ("rows", "cols"))
    return by_row, by_col, by_all


@functools.partial(pmap, axis_name="rows")
@functools.partial(pmap, axis_name="cols")
def grid_sums(x):
    return lax.psum(x, "rows"), lax.psum(x, "cols"), lax.psum(x, ("rows", "cols"))


def run():
    n = jax.local_device_count()
    grid = jnp.arange(1.0, n + 1.0).reshape((n // 2, 2))
    by_row, by_col, by_all = normalise_grid(grid)
    row_sum, col_sum, total = grid_sums(grid)
    return {
        "by_row": np.asarray(by_row),
        "by_row_colsum": np.asarray(by_row.sum(0)),
        "by_col": np.asarray(by_col),
        "by_all": np.asarray(by_all),
        "row_sum": np.asarray(row_sum),
        "col_sum": np.asarray(col_sum),
        "total": np.asarray(total),
    }
