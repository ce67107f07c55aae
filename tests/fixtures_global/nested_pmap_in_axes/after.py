"""A nested pmap with in_axes / out_axes of 0 and None per level goes global: an argument the
outer level does not map is split over the inner axis only (P("model")), one the inner level
does not map over the outer axis only (P("data")), and an outer out_axes of None gives a result
without the outer axis. The mesh's sizes come from an argument each level maps. The step takes
positional arguments only (pmap maps a keyword argument on axis 0 whatever in_axes says)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _grid_mesh(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return jax.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:rows * cols]
    )


def _layer(w, x):
    y = jax.lax.psum(x @ w, "model")
    grad_w = jax.lax.pmean(jnp.outer(x, y).sum(-1, keepdims=True) * w, "data")
    return w - 0.1 * grad_w, y + jax.lax.axis_index("data")


@jax.jit
def layer(w, x, /):
    def per_device(w, x):
        _squeeze = lambda tree, axes: jax.tree.map(lambda a: jax.lax.squeeze(a, axes), tree)
        _expand = lambda tree, axes: jax.tree.map(lambda a: jax.lax.expand_dims(a, axes), tree)
        w = _squeeze(w, (0,))
        x = _squeeze(x, (0,))
        _out = _layer(w, x)
        return (_expand(_out[0], (0,)), _expand(_out[1], (0, 1)))

    return jax.shard_map(
        per_device,
        mesh=_grid_mesh(
            (jax.numpy.shape(jax.tree.leaves(x)[0])[0], jax.numpy.shape(jax.tree.leaves(w)[0])[0]),
            ("data", "model"),
        ),
        in_specs=(P("model"), P("data")),
        out_specs=(P("model"), P("data", "model")),
        check_vma=False,
    )(w, x)


def run():
    n = jax.local_device_count()
    data, model = n // 2, 2
    w = jnp.arange(model * 3 * 4.0).reshape((model, 3, 4)) / 10.0
    x = jnp.arange(data * 3.0).reshape((data, 3))
    new_w, y = layer(w, x)
    return {"w": np.asarray(new_w), "y": np.asarray(y)}
