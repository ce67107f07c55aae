"""Multi-process flax-style step: built in the training function over functools.partial,
called with each device's dropout key by keyword; each process draws its own rows (by
process_index) and its own keys (folded with process_index), the parameters are the same on
every process."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def train_step(params, x, y, scale, dropout_rng=None):
    keep = jax.random.bernoulli(dropout_rng, 0.75, y.shape)
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(keep * (x @ p - y) ** 2) * scale)(params)
    grads = jax.lax.pmean(grads, "batch")
    return params - 0.1 * grads, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(7 + jax.process_index())
    key = jax.random.fold_in(jax.random.PRNGKey(0), jax.process_index())
    scale = 2.0
    params = jax.device_put_replicated(jnp.zeros((3,)), jax.local_devices())
    p_train_step = jax.pmap(functools.partial(train_step, scale=scale), axis_name="batch",
                            donate_argnums=(0,))
    losses = []
    for _ in range(3):
        key, step_key = jax.random.split(key)
        dropout_rngs = jax.random.split(step_key, n)
        x = rng.normal(size=(n * 4, 3)).astype(np.float32)
        y = x @ np.array([0.5, -1.0, 2.0], np.float32)
        params, loss = p_train_step(params, x.reshape(n, 4, 3), y.reshape(n, 4),
                                    dropout_rng=dropout_rngs)
        losses.append(np.asarray(loss[0]))
    return {"params": np.asarray(params[0]), "losses": np.asarray(losses),
            "process": np.asarray(jax.process_index())}
