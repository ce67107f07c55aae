"""static_broadcasted_argnums -> jax.jit(static_argnums=...) with pmap's numbering; shard_map
sees only the mapped arguments, the statics reach the body by closure."""
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


def _power_sum(x, num_terms):
    # `num_terms` is a Python int: the loop is unrolled at trace time.
    acc = jnp.zeros_like(x)
    term = jnp.ones_like(x)
    for _ in range(num_terms):
        acc = acc + term
        term = term * x
    return jax.lax.psum(acc, "i")


@functools.partial(jax.jit, static_argnums=1)
def power_sum(x, num_terms):
    return jax.shard_map(
        lambda x: _power_sum(x, num_terms),
        mesh=_mesh("i"),
        in_specs=(P("i"),),
        out_specs=P(),
        check_vma=False,
    )(x)


def activate(x, kind, scale, normalize):
    y = x * scale
    if kind == "relu":
        y = jax.nn.relu(y)
    if normalize:
        y = y / (jax.lax.pmax(jnp.max(jnp.abs(y)), "i") + 1e-6)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), y)


@functools.partial(jax.jit, static_argnums=(1, 3))
def p_activate(x, kind, scale, normalize):
    return jax.shard_map(
        lambda x, scale: activate(x, kind, scale, normalize),
        mesh=_mesh("i"),
        in_specs=(P("i"), P()),
        out_specs=P("i"),
        check_vma=False,
    )(x, scale)


def run():
    n = jax.local_device_count()
    x = np.linspace(-1.0, 1.0, n * 3, dtype=np.float32)
    scale = np.full((), 2.0, np.float32)[None]
    two = power_sum(x, 2)
    four = power_sum(x, 4)
    relu = p_activate(x, "relu", scale, False)
    normed = p_activate(x, "none", scale, True)
    return {
        "power_sum_2": np.asarray(two),
        "power_sum_4": np.asarray(four),
        "relu": np.asarray(relu),
        "normed": np.asarray(normed),
    }
