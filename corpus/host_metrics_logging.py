"""Training loop that logs per-step metrics to the host: `float(loss[0])` and
`jax.device_get(jax.tree_util.tree_map(lambda x: x[0], metrics))`, then synchronises the
replicated parameters with a pmapped pmean and unreplicates them for a jitted predict.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

LEARNING_RATE = 0.1


def loss_fn(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, axis_name="batch")
    loss = jax.lax.pmean(loss, axis_name="batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree_util.tree_leaves(grads)))
    metrics = {"loss": loss, "grad_norm": grad_norm, "step_size": LEARNING_RATE * grad_norm}
    return new_params, metrics, loss


# The usual "sync batch stats" idiom: average a replicated tree across devices.
sync = jax.pmap(lambda tree: jax.lax.pmean(tree, "batch"), axis_name="batch")


@jax.jit
def predict(params, x):
    return x @ params["w"] + params["b"]


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(3)
    true_w = rng.normal(size=(4, 2)).astype(np.float32)
    params = {"w": np.zeros((4, 2), np.float32), "b": np.zeros((2,), np.float32)}
    state = jax.tree_util.tree_map(lambda a: np.broadcast_to(a, (n,) + a.shape), params)

    losses, grad_norms, step_sizes = [], [], []
    for _ in range(4):
        x = rng.normal(size=(n, 8, 4)).astype(np.float32)
        y = x @ true_w
        state, metrics, loss = train_step(state, x, y)
        losses.append(float(loss[0]))
        logged = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], metrics))
        grad_norms.append(logged["grad_norm"])
        step_sizes.append(logged["step_size"])

    synced = sync(state)
    eval_params = jax.tree_util.tree_map(lambda x: x[0], synced)  # stays on device
    test_x = rng.normal(size=(3, 4)).astype(np.float32)
    return {
        "losses": np.asarray(losses, np.float32),
        "grad_norms": np.asarray(grad_norms),
        "step_sizes": np.asarray(step_sizes),
        "predictions": np.asarray(predict(eval_params, test_x)),
        "first_bias": np.asarray(eval_params["b"]),
    }
