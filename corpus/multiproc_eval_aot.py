"""A big_vision-style multi-process evaluator: the eval step compiled ahead of time and
called next to a direct call of the same pmap, on per-process data.

Each process evaluates its own slice of the data (`images[process_index::process_count]`),
in batches reshaped to `(jax.local_device_count(), -1, ...)`. The eval step `psum`s the
correct count over every device of every process and returns it once (`out_axes=None`). It is
compiled ahead of time with `eval_step.lower(...).compile()`, and each batch is evaluated by
that compiled program and by a direct call of the pmap, with no host sync in the loop: two
programs with the same collectives in flight at once. Every count must be the same global
count on every process. `run()` works with one process too.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

NUM_EXAMPLES = 192
BATCHES = 4


def dataset():
    rng = np.random.RandomState(3)
    images = rng.normal(size=(NUM_EXAMPLES, 6)).astype(np.float32)
    labels = (images[:, 0] + 0.5 * images[:, 1] > 0).astype(np.int32)
    return images, labels


def process_shard(images, labels):
    """This process's examples: every process_count-th one, from its index on."""
    index, count = jax.process_index(), jax.process_count()
    return images[index::count], labels[index::count]


def shard_batch(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


@functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0, 0), out_axes=None)
def eval_step(params, images, labels):
    logits = images @ params["w"] + params["b"]
    correct = jnp.sum((logits > 0) == (labels > 0))
    return jax.lax.psum(correct, "batch")


def run():
    params = {"w": np.array([1.0, 0.4, 0.3, -0.2, 0.1, 0.0], np.float32),
              "b": np.float32(0.05)}
    images, labels = process_shard(*dataset())
    per_batch = images.shape[0] // BATCHES
    batches = [(shard_batch(images[i * per_batch:(i + 1) * per_batch]),
                shard_batch(labels[i * per_batch:(i + 1) * per_batch])) for i in range(BATCHES)]
    compiled_eval = eval_step.lower(params, *batches[0]).compile()
    compiled_correct, direct_correct = [], []
    for batch in batches:
        compiled_correct.append(compiled_eval(params, *batch))
        direct_correct.append(eval_step(params, *batch))
    return {
        "compiled_correct": np.stack([np.asarray(c) for c in compiled_correct]),
        "direct_correct": np.stack([np.asarray(c) for c in direct_correct]),
        "examples": np.asarray(images.shape[0] * jax.process_count()),
    }
