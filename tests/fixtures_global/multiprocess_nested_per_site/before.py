"""PM505 judged at its own site: this module reads jax.process_index(), but only in `per_host`,
the one caller of `host_sums`. `grid_means`, which nothing process-dependent reaches, goes
global over its 2-D mesh; `host_sums` keeps jax.pmap (PM602 names the reference, PM505)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="hosts")
@functools.partial(jax.pmap, axis_name="chips")
def host_sums(x):
    return jax.lax.psum(x, "chips")


@functools.partial(jax.pmap, axis_name="rows")
@functools.partial(jax.pmap, axis_name="cols")
def grid_means(x):
    return jax.lax.pmean(x, "rows"), jax.lax.pmean(x, ("rows", "cols"))


def per_host(x):
    """Run on every host of a multi-process job: its rows are offset by the host's index."""
    return host_sums(x + jax.process_index())


def run():
    n = jax.local_device_count()
    grid = jnp.arange(n * 3.0).reshape((n // 2, 2, 3))
    by_col, overall = grid_means(grid)
    return {"by_col": np.asarray(by_col), "overall": np.asarray(overall)}
