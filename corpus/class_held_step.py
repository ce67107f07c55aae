"""Factory-built train step: make_train_step() returns jax.pmap(..., donate_argnums=0),
and a Trainer class holds it and calls it on its (donated) replicated state.
"""
import jax
import jax.numpy as jnp
import numpy as np


def make_train_step(lr, axis_name="batch"):
    def loss_fn(params, x, y):
        logits = x @ params["w"] + params["b"]
        return jnp.mean(jnp.logaddexp(0.0, -y * logits))

    def train_step(state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        grads = jax.lax.pmean(grads, axis_name)
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, state["params"], grads)
        new_state = {"params": params, "step": state["step"] + 1}
        return new_state, jax.lax.pmean(loss, axis_name)

    return jax.pmap(train_step, axis_name=axis_name, donate_argnums=0)


class Trainer:
    def __init__(self, features, lr=0.5):
        self.features = features
        self.train_step = make_train_step(lr)
        self.state = None
        self.last_input_deleted = False

    def init_state(self, n):
        params = {"w": jnp.zeros((self.features,)), "b": jnp.zeros(())}
        state = {"params": params, "step": jnp.zeros((), jnp.int32)}
        self.state = jax.tree_util.tree_map(lambda a: jnp.stack([a] * n), state)

    def fit(self, x, y, epochs):
        losses = []
        for _ in range(epochs):
            old_state = self.state
            self.state, loss = self.train_step(old_state, x, y)
            losses.append(float(loss[0]))
            # Inputs produced by a previous step are on device, so donation frees them.
            self.last_input_deleted = old_state["params"]["w"].is_deleted()
        return losses


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(11)
    x = rng.normal(size=(n, 6, 2)).astype(np.float32)
    y = np.where(x[..., 0] - 0.5 * x[..., 1] > 0, 1.0, -1.0).astype(np.float32)

    trainer = Trainer(features=2)
    trainer.init_state(n)
    losses = trainer.fit(x, y, epochs=4)
    state = jax.device_get(trainer.state)
    return {
        "w": np.asarray(state["params"]["w"]),
        "b": np.asarray(state["params"]["b"]),
        "step": np.asarray(state["step"]),
        "losses": np.asarray(losses),
        "donated_deleted": np.asarray(trainer.last_input_deleted),
    }
