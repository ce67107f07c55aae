# pmap-migrate-test: original needs legacy jax
"""Host logging as the Hugging Face Flax examples write it: `metric["loss"].mean()` of a
step's pmean'd metrics, `tree_map(jnp.mean, ...)` of them, and a get_metrics written in the
script that takes row 0 of every step's metrics in a list, then stacks them."""
import jax
import jax.numpy as jnp
import numpy as np


def shard(xs):
    return jax.tree_util.tree_map(
        lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]), xs)


def get_metrics(device_metrics):
    device_metrics = jax.tree_util.tree_map(lambda x: x[0], device_metrics)
    metrics_np = jax.device_get(device_metrics)
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *metrics_np)


def eval_step(w, batch):
    loss = jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
    return jax.lax.pmean({"loss": loss, "max": jnp.max(batch["y"])}, axis_name="batch")


p_eval_step = jax.pmap(eval_step, axis_name="batch")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices())
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
