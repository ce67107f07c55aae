"""in_axes=1 / out_axes=1 and an out_axes dict: a host array mapped on axis 1 is split on the
same axis (P(None, axis)) and the body's first statement squeezes it, as pmap's slice has no
such axis; results with out_axes k keep pmap's layout (expanded at k, P(None, ..., axis));
{"scaled": 0, "total": None} is a spec dict."""
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


def _column_softmax(x):
    # x is mapped along axis 1: each device sees one column of shape (rows,).
    x = jax.tree.map(lambda y: jnp.squeeze(y, 1), x)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 1), jax.nn.softmax(x))


@jax.jit
def column_softmax(x):
    return jax.shard_map(
        _column_softmax,
        mesh=_mesh("i"),
        in_specs=(P(None, "i"),),
        out_specs=P(None, "i"),
        check_vma=False,
    )(x)


def _scaled_columns(x, k):
    """A docstring stays first; the squeeze goes after it. k is static."""
    x = jax.tree.map(lambda y: jnp.squeeze(y, 1), x)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), x * k)


@functools.partial(jax.jit, static_argnums=1)
def scaled_columns(x, k):
    return jax.shard_map(
        lambda x: _scaled_columns(x, k),
        mesh=_mesh("i"),
        in_specs=(P(None, "i"),),
        out_specs=P("i"),
        check_vma=False,
    )(x)


def summarize(pair, scale):
    a, b = pair
    total = jax.lax.psum(jnp.sum(a) + jnp.sum(b), "i")
    return {
        "scaled": jax.tree.map(lambda y: jnp.expand_dims(y, 0), (a + b) * scale),
        "total": total,
    }


@jax.jit
def p_summarize(pair, scale):
    return jax.shard_map(
        summarize,
        mesh=_mesh("i"),
        in_specs=((P(), P("i")), P()),
        out_specs={"scaled": P("i"), "total": P()},
        check_vma=False,
    )(pair, scale)


@jax.jit
def p_split(v):
    return jax.shard_map(
        lambda v: (
    jax.tree.map(lambda y: jnp.expand_dims(y, 1), v * 2),
    jax.tree.map(lambda y: jnp.expand_dims(y, 0), jnp.sum(v)),
),
        mesh=_mesh("i"),
        in_specs=(P("i"),),
        out_specs=(P(None, "i"), P("i")),
        check_vma=False,
    )(v)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(2)
    cols = column_softmax(rng.normal(size=(4, n)).astype(np.float32))
    scaled = scaled_columns(np.ones((3, n), np.float32), 2)
    a = np.ones((2,), np.float32)
    b = np.arange(n * 2, dtype=np.float32)
    summary = p_summarize((a, b), 0.5)
    doubled_t, sums = p_split(b)
    return {
        "column_softmax": np.asarray(cols),
        "scaled_columns": np.asarray(scaled),
        "scaled": np.asarray(summary["scaled"]),
        "total": np.asarray(summary["total"]),
        "doubled_t": np.asarray(doubled_t),
        "sums": np.asarray(sums),
    }
