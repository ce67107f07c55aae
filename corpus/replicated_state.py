"""Replicated training state, 2023-24 style: the state is put on every device with
jax.device_put_replicated, each device's batch with jax.device_put_sharded, and a pmapped
step donates the state and averages gradients with lax.pmean."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np

LEARNING_RATE = 0.1
STEPS = 3


def init_state():
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(4, 2)).astype(np.float32), "b": np.zeros(2, np.float32)}
    # Python scalars: replicated as weakly typed arrays, as jax.device_put_replicated does.
    return {"params": params, "lr": LEARNING_RATE, "step": 0}


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(state, x, y):
    def loss_fn(params):
        pred = x @ params["w"] + params["b"]
        return jnp.mean((pred - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    grads = jax.lax.pmean(grads, axis_name="batch")
    params = jax.tree_util.tree_map(lambda p, g: p - state["lr"] * g, state["params"], grads)
    new_state = {"params": params, "lr": state["lr"], "step": state["step"] + 1}
    return new_state, jax.lax.pmean(loss, axis_name="batch")


def run():
    devices = jax.local_devices()
    n = len(devices)
    state = jax.device_put_replicated(init_state(), devices)
    rng = np.random.default_rng(1)
    true_w = np.array([[1.0, -1.0], [0.5, 0.0], [0.0, 2.0], [-0.5, 1.0]], np.float32)
    losses, deleted = [], []
    for _ in range(STEPS):
        xs = rng.normal(size=(n, 8, 4)).astype(np.float32)
        x = jax.device_put_sharded([xs[i] for i in range(n)], devices)
        y = jax.device_put_sharded([xs[i] @ true_w for i in range(n)], devices)
        new_state, loss = train_step(state, x, y)
        deleted.append([leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(state)])
        state = new_state
        losses.append(np.asarray(loss))
    return {
        "w": np.asarray(state["params"]["w"]),
        "b": np.asarray(state["params"]["b"]),
        "step": np.asarray(state["step"]),
        "lr": np.asarray(state["lr"]),
        "losses": np.stack(losses),
        "donated_deleted": np.array(deleted),
        "x_shard_shape": np.array(x.addressable_shards[0].data.shape),
    }
