"""Project-local pmap wrappers, 2023-24 style: `parallelize(fn, **kw)` fixes the axis name
and forwards the rest to pmap; the mapping transform is chosen at run time (`jax.pmap` with
several devices, `jax.vmap` otherwise), kept in a table, or handed to a helper. Every use of
those values is a call.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

BROADCAST_SECOND = (0, None)
MAPPERS = {"parallel": jax.pmap, "serial": jax.vmap}


def parallelize(fn, **kw):
    """The project's pmap: always over the "batch" axis."""
    return jax.pmap(fn, axis_name="batch", **kw)


def with_mapper(mapper, fn, **kw):
    return mapper(fn, **kw)


def _sgd(params, grads, lr):
    return jax.tree_util.tree_map(lambda p, g: p - lr * jax.lax.pmean(g, "batch"), params, grads)


def _scale(x, k, power):
    return jax.lax.psum(x * k, "batch") ** power


def _normalize(x):
    return x / jax.lax.pmax(jnp.abs(x), "batch")


def run():
    n = jax.local_device_count()
    mapper = jax.pmap if n > 1 else jax.vmap
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 4.0
    params = {"w": jnp.ones((n, 3), jnp.float32), "b": jnp.zeros((n,), jnp.float32)}
    grads = {"w": x, "b": x.sum(-1)}

    sgd = parallelize(_sgd, in_axes=(0, 0, None), donate_argnums=(0,))
    old = params
    params = sgd(params, grads, 0.1)
    scale = parallelize(_scale, in_axes=BROADCAST_SECOND + (None,), static_broadcasted_argnums=(2,))
    total = parallelize(lambda v: jax.lax.psum(v, "batch"), out_axes=None)
    normalize = mapper(_normalize, axis_name="batch")
    table_sum = MAPPERS["parallel"](lambda v: jax.lax.psum(v, "batch"), axis_name="batch")
    via_helper = with_mapper(jax.pmap, _normalize, axis_name="batch")
    return {
        "w": np.asarray(params["w"]),
        "b": np.asarray(params["b"]),
        "donated_deleted": np.asarray(old["w"].is_deleted()),
        "scaled": np.asarray(scale(x, np.float32(0.5), 2)),
        "total": np.asarray(total(x)),
        "normalized": np.asarray(normalize(x)),
        "table_sum": np.asarray(table_sum(x)),
        "via_helper": np.asarray(via_helper(x + 1.0)),
    }
