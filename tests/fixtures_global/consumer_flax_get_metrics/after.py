"""flax's common_utils.get_metrics over a list of a step's replicated metrics, as flax's
examples log them (rewrite only: flax is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax.training import common_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch @ p) ** 2))(params)
    grads = jax.lax.pmean(grads, "batch")
    metrics = {"loss": jax.lax.pmean(loss, "batch"), "norm": jax.lax.pmean(jnp.sum(grads ** 2), "batch")}
    return params - 0.1 * grads, metrics


@jax.jit
def train_step(params, batch):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, batch)


def train(params, batches, log_every):
    mesh = _mesh("batch")
    params = jax.device_put(params, NamedSharding(mesh, P()))
    train_metrics = []
    for step, batch in enumerate(batches):
        params, metrics = train_step(
            params, jax.device_put(batch, NamedSharding(mesh, P("batch")))
        )
        train_metrics.append(metrics)
        if (step + 1) % log_every == 0:
            stacked = common_utils.stack_forest(jax.device_get(train_metrics))
            summary = jax.tree_util.tree_map(lambda x: x.mean(), stacked)
            print(step, summary["loss"], summary["norm"])
            train_metrics = []
    return params
