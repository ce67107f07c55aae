"""Per-device results with a leading axis come back merged (P(axis)) and feed the next step; a per-device scalar result keeps pmap's stacked layout."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _activate(x, w):
    return jnp.tanh(x @ w)


@jax.jit
def activate(x, w):
    return jax.shard_map(
        _activate,
        mesh=_mesh("devices"),
        in_specs=(P("devices"), P()),
        out_specs=P("devices"),
        check_vma=False,
    )(x, w)


def _shift(h, bias):
    return h + bias, jnp.zeros_like(h)


@jax.jit
def shift(h, bias):
    return jax.shard_map(
        _shift,
        mesh=_mesh("devices"),
        in_specs=(P("devices"), P("devices")),
        out_specs=P("devices"),
        check_vma=False,
    )(h, bias)


def _per_device_max(h):
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), jnp.max(h))


@jax.jit
def per_device_max(h):
    return jax.shard_map(
        _per_device_max,
        mesh=_mesh("devices"),
        in_specs=(P("devices"),),
        out_specs=P("devices"),
        check_vma=False,
    )(h)


def run():
    n = jax.local_device_count()
    x = np.linspace(-1.0, 1.0, n * 3 * 2, dtype=np.float32).reshape(n * 3, 2)
    w = np.eye(2, dtype=np.float32)
    h = activate(x, w)
    shifted, zeros = shift(h, jnp.ones_like(h))
    return {
        "h": np.asarray(h),
        "shifted": np.asarray(shifted),
        "zeros": np.asarray(zeros),
        "max": np.asarray(per_device_max(shifted)),
    }
