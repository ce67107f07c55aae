"""Batches reshaped with the shape written as one tuple (`x.reshape((n, -1, 3))`,
`jnp.reshape(x, (n, 2))`) merge like the positional form (which may end in `*x.shape[k:]`),
and the flat copy of a batch (`.ravel()`) is the original's, since merging keeps the
row-major order."""
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


def step(x, scale):
    return jax.lax.pmean(jnp.tanh(x * scale), "batch")


@jax.jit
def p_step(x, scale):
    return jax.shard_map(
        step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(x, scale)


def run():
    n = jax.local_device_count()
    rows = np.arange(n * 4 * 3, dtype=np.float32) / 10.0
    batch = rows.reshape((-1, 3))
    scale = jnp.reshape(jnp.linspace(0.5, 1.5, n * 2), (n, 2))[:, :, None]
    flat = np.asarray(batch).ravel()
    out = p_step(batch, jnp.reshape(jnp.linspace(0.5, 1.5, n * 3), (n, 3)))
    template = np.zeros((1, 3), np.float32)
    again = rows.reshape(-1, *template.shape[1:])  # positional, a starred rest
    out_again = p_step(again, jnp.reshape(jnp.linspace(0.5, 1.5, n * 3), (n, 3)))
    return {"out": np.asarray(out), "flat": flat, "scale": np.asarray(scale),
            "again": np.asarray(out_again)}
