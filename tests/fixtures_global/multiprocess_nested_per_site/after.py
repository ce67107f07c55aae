"""PM505 judged at its own site: this module reads jax.process_index(), but only in `per_host`,
the one caller of `host_sums`. `grid_means`, which nothing process-dependent reaches, goes
global over its 2-D mesh; `host_sums` keeps jax.pmap (PM602 names the reference, PM505)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


# TODO(pmap-migrate): PM505 multi-process pmap kept: check by hand
@functools.partial(jax.pmap, axis_name="hosts")
@functools.partial(jax.pmap, axis_name="chips")
def host_sums(x):
    return jax.lax.psum(x, "chips")


@functools.cache
def _grid_mesh(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return jax.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:rows * cols]
    )


def _grid_means(x):
    return jax.lax.pmean(x, "rows"), jax.lax.pmean(x, ("rows", "cols"))


@jax.jit
def grid_means(x):
    def per_device(x):
        _squeeze = lambda tree, axes: jax.tree.map(lambda a: jax.lax.squeeze(a, axes), tree)
        _expand = lambda tree, axes: jax.tree.map(lambda a: jax.lax.expand_dims(a, axes), tree)
        x = _squeeze(x, (0, 1))
        return _expand(_grid_means(x), (0, 1))

    return jax.shard_map(
        per_device, mesh=_grid_mesh(jax.numpy.shape(jax.tree.leaves(x)[0])[:2], ("rows", "cols")),
        in_specs=(P("rows", "cols"),), out_specs=P("rows", "cols"), check_vma=False,
    )(x)


def per_host(x):
    """Run on every host of a multi-process job: its rows are offset by the host's index."""
    return host_sums(x + jax.process_index())


def run():
    n = jax.local_device_count()
    grid = jnp.arange(n * 3.0).reshape((n // 2, 2, 3))
    by_col, overall = grid_means(grid)
    return {"by_col": np.asarray(by_col), "overall": np.asarray(overall)}
