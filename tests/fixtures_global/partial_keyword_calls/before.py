"""flax's language examples (wmt, lm1b, nlp_seq): a train step built in the training function
over functools.partial binding model and schedule, called with the per-device dropout keys
by keyword (`p_train_step(state, batch, dropout_rng=dropout_rngs)`); an eval step given a
field of the replicated state (`state.params`); metrics read back from device 0."""
# pmap-migrate-test: original needs legacy jax
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class TrainState(NamedTuple):
    step: Any
    params: Any


def train_step(state, batch, scale, learning_rate_fn, label_smoothing=0.0, dropout_rng=None):
    """One step: dropout from this device's key, gradients averaged over devices."""
    dropout_rng = jax.random.fold_in(dropout_rng, state.step)
    keep = jax.random.bernoulli(dropout_rng, 0.8, batch["y"].shape)

    def loss_fn(params):
        error = batch["x"] @ params["w"] + params["b"] - batch["y"]
        return jnp.mean(keep * error ** 2) * scale + label_smoothing

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    lr = learning_rate_fn(state.step)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, state.params, grads)
    metrics = {"loss": jax.lax.pmean(loss, "batch"), "learning_rate": lr}
    return TrainState(step=state.step + 1, params=params), metrics


def eval_step(params, batch, scale):
    error = batch["x"] @ params["w"] + params["b"] - batch["y"]
    return jax.lax.psum(jnp.sum(error ** 2) * scale, "batch")


def train_and_evaluate(num_steps):
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    learning_rate_fn = lambda step: 0.1 / (1.0 + step)
    scale = 2.0
    state = TrainState(step=jnp.zeros((), jnp.int32),
                       params={"w": jnp.zeros((4,)), "b": jnp.zeros(())})
    state = jax.device_put_replicated(state, jax.local_devices())
    p_train_step = jax.pmap(
        functools.partial(train_step, scale=scale, learning_rate_fn=learning_rate_fn),
        axis_name="batch", donate_argnums=(0,))
    p_eval_step = jax.pmap(functools.partial(eval_step, scale=scale), axis_name="batch")
    dropout_rngs = jax.random.split(jax.random.PRNGKey(0), jax.local_device_count())
    losses, rates, errors = [], [], []
    for _ in range(num_steps):
        x = rng.normal(size=(n * 8, 4)).astype(np.float32)
        y = rng.normal(size=(n * 8,)).astype(np.float32)
        batch = {"x": x.reshape((n, -1) + x.shape[1:]), "y": y.reshape((n, -1))}
        state, metrics = p_train_step(state, batch, dropout_rng=dropout_rngs)
        first = jax.tree_util.tree_map(lambda v: v[0], metrics)
        losses.append(np.asarray(first["loss"]))
        rates.append(np.asarray(first["learning_rate"]))
        errors.append(np.asarray(p_eval_step(state.params, batch)[0]))
    params = jax.device_get(jax.tree_util.tree_map(lambda v: v[0], state.params))
    return params, np.asarray(losses), np.asarray(rates), np.asarray(errors)


def run():
    params, losses, rates, errors = train_and_evaluate(3)
    return {"w": np.asarray(params["w"]), "b": np.asarray(params["b"]), "losses": losses,
            "rates": rates, "errors": errors}
