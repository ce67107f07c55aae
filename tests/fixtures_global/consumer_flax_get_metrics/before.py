"""flax's common_utils.get_metrics over a list of a step's replicated metrics, as flax's
examples log them (rewrite only: flax is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch @ p) ** 2))(params)
    grads = jax.lax.pmean(grads, "batch")
    metrics = {"loss": jax.lax.pmean(loss, "batch"), "norm": jax.lax.pmean(jnp.sum(grads ** 2), "batch")}
    return params - 0.1 * grads, metrics


def train(params, batches, log_every):
    params = jax_utils.replicate(params)
    train_metrics = []
    for step, batch in enumerate(batches):
        params, metrics = train_step(params, common_utils.shard(batch))
        train_metrics.append(metrics)
        if (step + 1) % log_every == 0:
            stacked = common_utils.get_metrics(train_metrics)
            summary = jax.tree_util.tree_map(lambda x: x.mean(), stacked)
            print(step, summary["loss"], summary["norm"])
            train_metrics = []
    return jax_utils.unreplicate(params)
