# pmap-migrate-test: original needs legacy jax
"""Host logging as the Hugging Face Flax examples write it: `metric["loss"].mean()` of a
step's pmean'd metrics, `tree_map(jnp.mean, ...)` of them, and a get_metrics written in the
script that takes row 0 of every step's metrics in a list, then stacks them."""
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


def shard(xs):
    return jax.tree_util.tree_map(
        lambda x: x.reshape((-1,) + x.shape[1:]), xs)


def get_metrics(device_metrics):
    metrics_np = jax.device_get(device_metrics)
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *metrics_np)


def eval_step(w, batch):
    loss = jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
    return jax.lax.pmean({"loss": loss, "max": jnp.max(batch["y"])}, axis_name="batch")


@jax.jit
def p_eval_step(w, batch):
    return jax.shard_map(
        eval_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, batch)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    metrics = []
    for _ in range(3):
        batch = {"x": rng.normal(size=(4 * n, 3)).astype(np.float32),
                 "y": rng.normal(size=(4 * n,)).astype(np.float32)}
        metric = p_eval_step(w, shard(batch))
        metrics.append(metric)
    last = float(metric["loss"].mean())
    means = jax.tree_util.tree_map(jnp.mean, metric)
    stacked = get_metrics(metrics)
    return {"last": np.asarray(last), "mean_loss": np.asarray(means["loss"]),
            "losses": stacked["loss"], "maxes": stacked["max"]}
