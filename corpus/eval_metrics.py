"""Evaluation loop: psum of correct-prediction counts and example counts across devices,
then unreplicate with `jax.tree_util.tree_map(lambda x: x[0], out)`.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

NUM_CLASSES = 3


@functools.partial(jax.pmap, axis_name="batch")
def eval_step(params, images, labels):
    logits = images @ params["w"] + params["b"]
    preds = jnp.argmax(logits, axis=-1)
    log_probs = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
    metrics = {
        "correct": jnp.sum(preds == labels),
        "count": labels.shape[0],
        "loss_sum": jnp.sum(nll),
    }
    return jax.lax.psum(metrics, axis_name="batch")


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(7)
    w = rng.normal(size=(4, NUM_CLASSES)).astype(np.float32)
    b = np.zeros((NUM_CLASSES,), np.float32)
    params = jax.tree_util.tree_map(
        lambda a: np.broadcast_to(a, (n,) + a.shape), {"w": w, "b": b}
    )

    totals = {"correct": 0, "count": 0, "loss_sum": 0.0}
    per_batch_acc = []
    for _ in range(3):
        images = rng.normal(size=(n, 5, 4)).astype(np.float32)
        labels = np.argmax(images[..., :NUM_CLASSES] + 0.3, axis=-1).astype(np.int32)
        out = eval_step(params, images, labels)
        metrics = jax.device_get(unreplicate(out))
        totals = {k: totals[k] + metrics[k] for k in totals}
        per_batch_acc.append(metrics["correct"] / metrics["count"])

    return {
        "correct": np.asarray(totals["correct"]),
        "count": np.asarray(totals["count"]),
        "mean_loss": np.asarray(totals["loss_sum"] / totals["count"]),
        "batch_accuracy": np.asarray(per_batch_acc),
    }
