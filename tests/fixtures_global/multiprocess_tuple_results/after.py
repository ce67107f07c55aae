"""Multi-process: a step whose results are a tuple, each replicated (the weights, their
moving average, a dict of pmean'd metrics), as flax's pixelcnn train step returns them. Every
result is a fully replicated global array, so the call is written as for one replicated result.
"""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(w, ema, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    w = w - 0.1 * grad
    ema = 0.9 * ema + 0.1 * w
    return w, ema, {"loss": jax.lax.pmean(jnp.sum(x), "batch")}


@jax.jit
def train_step(w, ema, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P(), P("batch")),
        out_specs=(P(), P(), P()),
        check_vma=False,
    )(w, ema, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
    ema = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
    losses = []
    for i in range(3):
        x = rng.normal(size=(n * 2, 3)).astype(np.float32)
        w, ema, metrics = train_step(
            w,
            ema,
            jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
        )
        losses.append(metrics["loss"])
    return {"w": np.asarray(w), "ema": np.asarray(ema), "losses": np.asarray(losses)}
