"""A caller of a nested pmap and of a 1-D step: the nested pmap goes global over its 2-D mesh,
taking and returning pmap's rows, so the caller may call it like a function it does not
follow, handing it only values it leaves as the original had them (`y.reshape` to an explicit
shape is the same array either way); the 1-D step goes global with it."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _scale(x):
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), x * 2.0 / lax.psum(x.sum(), "i"))


@jax.jit
def scale(x):
    return jax.shard_map(
        _scale, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
    )(x)


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
    x = jnp.arange(n * 3.0).reshape((n * 3,)) + 1.0
    y = scale(x)
    g = grid(y.reshape((n // 2, 2, 3)))
    z = scale(g.reshape((n * 3,)))
    return {"y": np.asarray(y), "g": np.asarray(g), "z": np.asarray(z)}
