"""flax's shard_prng_key: one dropout key per device, as flax's pixelcnn passes it to its
train step; the keys keep pmap's stacked layout (rewrite only: flax is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, batch, dropout_rng):
    keep = jax.random.bernoulli(dropout_rng, 0.9, batch.shape[:1])
    loss = jnp.mean(jnp.where(keep, batch @ params, 0.0) ** 2)
    grads = jax.lax.pmean(jax.grad(lambda p: jnp.mean((batch @ p) ** 2))(params), "batch")
    return params - 0.1 * grads, jax.lax.pmean(loss, "batch")


def train(params, batches, rng):
    params = jax_utils.replicate(params)
    for batch in batches:
        rng, step_rng = jax.random.split(rng)
        params, loss = train_step(params, common_utils.shard(batch),
                                  common_utils.shard_prng_key(step_rng))
        print(float(loss[0]))
    return jax_utils.unreplicate(params)
