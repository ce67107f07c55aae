"""functools.partial as flax's examples write it: keywords that bind parameters in the middle
(the ones after them keep their defaults), leading parameters bound by position, a keyword read
from a config attribute, static_broadcasted_argnums over a partial, and the platform read
from `jax.local_devices()[0]`."""
# pmap-migrate-test: original needs legacy jax
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def train_step(state, batch, config, learning_rate_fn, label_smoothing=0.0):
    lr = learning_rate_fn(state["step"])
    grads = jax.grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2) * config.scale)(
        state["w"])
    grads = jax.lax.pmean(grads, axis_name="batch")
    loss = jax.lax.pmean(jnp.mean(batch["y"]) + label_smoothing, "batch")
    return {"w": state["w"] - lr * grads, "step": state["step"] + 1}, loss


def eval_step(config, params, batch):
    error = jnp.mean((batch["x"] @ params - batch["y"]) ** 2) * config.scale
    return jax.lax.pmean(error, "batch")


def predict_step(inputs, params, eos_id, max_len, config, temperature=1.0):
    out = inputs * params[:6] * config.scale / temperature
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0),
        out[:, :max_len] + eos_id + jax.lax.pmean(jnp.sum(out), "batch"),
    )


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    config = types.SimpleNamespace(scale=2.0, label_smoothing=0.1)
    learning_rate_fn = lambda step: 0.1 / (1.0 + step)
    platform = jax.local_devices()[0].platform
    state = jax.device_put({"w": jnp.zeros((6,)), "step": jnp.zeros(())}, NamedSharding(mesh, P()))
    p_train_step = jax.jit(jax.shard_map(
        functools.partial(train_step, config=config, learning_rate_fn=learning_rate_fn,
                          label_smoothing=config.label_smoothing),
        mesh=_mesh("batch"),
        in_specs=(P(), {"x": P("batch"), "y": P("batch")}),
        out_specs=(P(), P()),
        check_vma=False,
    ), donate_argnums=(0,))
    p_eval_step = jax.jit(jax.shard_map(
        functools.partial(eval_step, config),
        mesh=_mesh("batch"),
        in_specs=(P(), {"x": P("batch"), "y": P("batch")}),
        out_specs=P(),
        check_vma=False,
    ))

    @functools.partial(jax.jit, static_argnums=(2, 3))
    def p_pred_step(inputs, params, eos_id, max_len):
        return jax.shard_map(
            lambda inputs, params: predict_step(
                inputs, params, eos_id, max_len, config=config, temperature=2.0
            ),
            mesh=_mesh("batch"),
            in_specs=(P("batch"), P()),
            out_specs=P("batch"),
            check_vma=False,
        )(inputs, params)

    losses, errors = [], []
    for _ in range(3):
        x = rng.normal(size=(n * 8, 6)).astype(np.float32)
        y = rng.normal(size=(n * 8,)).astype(np.float32)
        batch = {"x": x.reshape((-1,) + x.shape[1:]), "y": y.reshape((-1,))}
        state, loss = p_train_step(state, batch)
        losses.append(np.asarray(loss))
        errors.append(np.asarray(p_eval_step(state["w"], batch)))
    inputs = np.arange(n * 2 * 6, dtype=np.float32).reshape(n * 2, 6)
    predicted = p_pred_step(inputs, state["w"], 1, 4)
    return {"w": np.asarray(state["w"]), "losses": np.asarray(losses),
            "errors": np.asarray(errors), "predicted": np.asarray(predicted),
            "on_cpu": np.asarray(platform == "cpu")}
