"""in_axes trees: a dict argument with per-device weights and a shared bias
(in_axes=({"w": 0, "b": None}, 0)) gets the spec tree ({"w": P(axis), "b": P()}, P(axis))."""
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


def _linear(params, x):
    # Per-device weights, one shared bias broadcast to all devices.
    return x @ params["w"] + params["b"]


@jax.jit
def linear(params, x):
    return jax.shard_map(
        _linear,
        mesh=_mesh("i"),
        in_specs=({"w": P("i"), "b": P()}, P("i")),
        out_specs=P("i"),
        check_vma=False,
    )(params, x)


def pair_total(pair, scale):
    a, b = pair
    return jax.lax.psum(jnp.sum(a) + jnp.sum(b), "i") * scale


@jax.jit
def p_total(pair, scale):
    return jax.shard_map(
        pair_total, mesh=_mesh("i"), in_specs=((P(), P("i")), P()), out_specs=P(), check_vma=False
    )(pair, scale)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(2)
    params = {
        "w": rng.normal(size=(n * 3, 2)).astype(np.float32),
        "b": np.array([0.5, -0.5], np.float32),
    }
    x = rng.normal(size=(n * 4, 3)).astype(np.float32)
    y = linear(params, x)
    a = np.ones((2,), np.float32)
    b = np.arange(n * 2, dtype=np.float32)
    total = p_total((a, b), 0.5)
    return {"linear": np.asarray(y), "total": np.asarray(total)}
