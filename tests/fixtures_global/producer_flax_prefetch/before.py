"""flax's input path: common_utils.shard mapped over a dataset and prefetch_to_device, read in
`for step, batch in zip(range(k), it)`. flax >= 0.12.7's prefetch_to_device places each leaf
split on its leading axis, so the global batch comes out placed P(axis) (rewrite only: flax
is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="batch")
def train_step(w, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch["x"] @ p - batch["y"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


def train(w, dataset, num_steps):
    it = map(common_utils.shard, dataset)
    it = jax_utils.prefetch_to_device(it, 2)
    w = jax_utils.replicate(w)
    for step, batch in zip(range(num_steps), it):
        w, loss = train_step(w, batch)
        print(step, float(loss[0]))
    return jax_utils.unreplicate(w)
