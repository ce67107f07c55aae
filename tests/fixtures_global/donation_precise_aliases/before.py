"""A train step that donates its state, handed with an eval step to a helper each iteration,
in the shape flax's language examples have: the steps' keys split from one key, a loop over
range, batches drawn from a numpy generator, metrics logged through a writer."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


class Writer:
    def __init__(self):
        self.rows = []

    def write(self, step, values):
        self.rows.append((step, values))


def train_step(params, batch, dropout_rng, learning_rate):
    keep = jax.random.bernoulli(dropout_rng, 0.75, batch.shape)
    grad = jax.lax.pmean(jnp.mean(keep * batch, axis=0), "batch")
    return params - learning_rate * grad


def eval_step(params, batch):
    return jax.lax.psum(jnp.sum(batch @ params), "batch")


def evaluate(*, p_eval_step, params, batch):
    return float(p_eval_step(params, batch)[0])


def run(num_steps=3):
    n = jax.local_device_count()
    rng = jax.random.PRNGKey(0)
    rng, init_rng = jax.random.split(rng)
    params = jax.device_put_replicated(jax.random.normal(init_rng, (3,)), jax.local_devices())
    data = np.random.RandomState(0)
    writer = Writer()
    p_train_step = jax.pmap(functools.partial(train_step, learning_rate=0.1),
                            axis_name="batch", donate_argnums=(0,))
    p_eval_step = jax.pmap(eval_step, axis_name="batch")
    dropout_rngs = jax.random.split(rng, n)
    for step in range(num_steps):
        batch = data.normal(size=(n, 4, 3)).astype(np.float32)
        params = p_train_step(params, batch, dropout_rngs)
        writer.write(step, evaluate(p_eval_step=p_eval_step, params=params, batch=batch))
    return {"params": np.asarray(params[0]), "errors": np.asarray([v for _, v in writer.rows])}
