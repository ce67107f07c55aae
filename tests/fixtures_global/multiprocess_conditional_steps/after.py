"""Multi-process steps under conditions. `every` is a parameter, so `i % every == 0` could
differ between processes: the eval step under it waits for every process in its psum, in the
original as in the migration, and its batch is made global at the call without waiting. The
scale replicated under that condition keeps pmap's stacked layout: placed with P(), it would
wait for every process to place it. Process 0 alone runs a step without collectives."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from _pmap_helpers import _device_put_replicated


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(w, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, x)


def _evaluate(w, scale, x):
    scale = jax.tree.map(lambda y: jnp.squeeze(y, 0), scale)
    return jax.lax.psum(jnp.sum(x @ w) * scale, "batch")


@jax.jit
def evaluate(w, scale, x):
    return jax.shard_map(
        _evaluate,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, scale, x)


def _predict(w, x):
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), x @ w)


@jax.jit
def predict(w, x):
    return jax.shard_map(
        _predict,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(w, x)


def run(every=2):
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
    losses, predictions = [], []
    for i in range(4):
        x = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("batch")),
            rng.normal(size=(n * 2, 3)).astype(np.float32),
        )
        w = train_step(w, x)
        if i % every == 0:
            scale = _device_put_replicated(jnp.float32(i + 1), jax.local_devices())
            losses.append(evaluate(
                w,
                multihost_utils.host_local_array_to_global_array(scale, mesh, P("batch")),
                x,
            ))
        if jax.process_index() == 0:
            predictions.append(np.asarray(multihost_utils.global_array_to_host_local_array(
                predict(w, x),
                mesh,
                P("batch"),
            )))
    return {"w": np.asarray(w), "losses": np.stack([np.asarray(l) for l in losses]),
            "predictions": np.asarray(predictions, np.float32).reshape(-1, 2)}
