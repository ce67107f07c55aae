"""A big_vision-style multi-process evaluator and trainer (big_vision/train.py shape).

Each process reads only its part of the data, chosen by `jax.process_index()` (the input
pipeline's `shard(process_count, process_index)`), reshaped to `(jax.local_device_count(),
-1, ...)`. The update step is compiled ahead of time with `.lower(...).compile()` and the
compiled program is called in the loop. Metrics are `psum`med over every device, and the
summary is written only on process 0 (`jax.process_index() == 0`). `run()` works with one
process too.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

NUM_EXAMPLES = 64


def dataset():
    rng = np.random.RandomState(7)
    images = rng.normal(size=(NUM_EXAMPLES, 5)).astype(np.float32)
    labels = (images.sum(axis=1) > 0).astype(np.int32)
    return images, labels


def process_shard(images, labels):
    """This process's examples: every process_count-th one, from its index on."""
    index, count = jax.process_index(), jax.process_count()
    return images[index::count], labels[index::count]


def shard_batch(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def update_fn(params, images, labels):
    def loss_fn(p):
        logits = images @ p["w"] + p["b"]
        return jnp.mean((logits - labels) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return params, jax.lax.pmean(loss, "batch")


@functools.partial(jax.pmap, axis_name="batch")
def eval_fn(params, images, labels):
    logits = images @ params["w"] + params["b"]
    correct = jnp.sum((logits > 0.5) == (labels > 0))
    return {"correct": jax.lax.psum(correct, "batch"),
            "count": jax.lax.psum(labels.shape[0], "batch")}


def run():
    n = jax.local_device_count()
    images, labels = process_shard(*dataset())
    params = {"w": np.zeros((n, 5), np.float32), "b": np.zeros((n,), np.float32)}

    steps = 2
    per_step = images.shape[0] // steps
    first = [shard_batch(a[:per_step]) for a in (images, labels)]
    compiled_update = update_fn.lower(params, *first).compile()

    summary, losses = {}, []
    for step in range(steps):
        batch = [shard_batch(a[step * per_step:(step + 1) * per_step]) for a in (images, labels)]
        params, loss = compiled_update(params, *batch)
        losses.append(np.asarray(loss))
    metrics = eval_fn(params, shard_batch(images), shard_batch(labels))
    if jax.process_index() == 0:
        summary = {"accuracy": np.asarray(metrics["correct"][0] / metrics["count"][0])}
    return {
        "losses": np.stack(losses),
        "params": jax.tree_util.tree_map(np.asarray, params),
        "summary": summary,
        "first_images": shard_batch(images)[:, 0],
    }
