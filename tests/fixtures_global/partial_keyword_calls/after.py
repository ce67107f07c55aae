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
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


class TrainState(NamedTuple):
    step: Any
    params: Any


def train_step(state, batch, scale, learning_rate_fn, label_smoothing=0.0, dropout_rng=None):
    """One step: dropout from this device's key, gradients averaged over devices."""
    dropout_rng = jax.tree.map(lambda y: jnp.squeeze(y, 0), dropout_rng)
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
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    learning_rate_fn = lambda step: 0.1 / (1.0 + step)
    scale = 2.0
    state = TrainState(step=jnp.zeros((), jnp.int32),
                       params={"w": jnp.zeros((4,)), "b": jnp.zeros(())})
    state = jax.device_put(jax.tree.map(jnp.copy, state), NamedSharding(mesh, P()))

    @functools.partial(jax.jit, donate_argnums=(0,))
    def p_train_step(state, batch, dropout_rng):
        return jax.shard_map(
            lambda state, batch, dropout_rng: train_step(
                state,
                batch,
                scale=scale,
                learning_rate_fn=learning_rate_fn,
                dropout_rng=dropout_rng,
            ),
            mesh=_mesh("batch"),
            in_specs=(P(), {"x": P("batch"), "y": P("batch")}, P("batch")),
            out_specs=P(),
            check_vma=False,
        )(state, batch, dropout_rng)

    p_eval_step = jax.jit(jax.shard_map(
        functools.partial(eval_step, scale=scale),
        mesh=_mesh("batch"),
        in_specs=(P(), {"x": P("batch"), "y": P("batch")}),
        out_specs=P(),
        check_vma=False,
    ))
    dropout_rngs = jax.random.split(jax.random.PRNGKey(0), jax.local_device_count())
    losses, rates, errors = [], [], []
    for _ in range(num_steps):
        x = rng.normal(size=(n * 8, 4)).astype(np.float32)
        y = rng.normal(size=(n * 8,)).astype(np.float32)
        batch = {"x": x.reshape((-1,) + x.shape[1:]), "y": y.reshape((-1,))}
        state, metrics = p_train_step(state, batch, dropout_rng=dropout_rngs)
        first = metrics
        losses.append(np.asarray(first["loss"]))
        rates.append(np.asarray(first["learning_rate"]))
        errors.append(np.asarray(p_eval_step(state.params, batch)))
    params = jax.device_get(state.params)
    return params, np.asarray(losses), np.asarray(rates), np.asarray(errors)


def run():
    params, losses, rates, errors = train_and_evaluate(3)
    return {"w": np.asarray(params["w"]), "b": np.asarray(params["b"]), "losses": losses,
            "rates": rates, "errors": errors}
