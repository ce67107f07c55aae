"""A class holds a module factory's pmap (`self.step = make_step(lr)`, axis_name left to the
factory's default) and calls it on replicated state it keeps on `self` (a donating one:
class_held_donated_flag, fallback_class_donates)."""
import jax
import jax.numpy as jnp
import numpy as np


def make_step(lr, axis_name="batch"):
    def loss_fn(w, x):
        return jnp.mean((x @ w - 1.0) ** 2)

    def step(w, x):
        loss, grad = jax.value_and_grad(loss_fn)(w, x)
        return w - lr * jax.lax.pmean(grad, axis_name), jax.lax.pmean(loss, axis_name)

    return jax.pmap(step, axis_name=axis_name)


class Trainer:
    def __init__(self, lr):
        self.step = make_step(lr)
        self.w = None

    def init(self, n):
        self.w = jnp.zeros((n, 3))

    def fit(self, x, epochs):
        losses = []
        for _ in range(epochs):
            old = self.w
            self.w, loss = self.step(old, x)
            losses.append(float(loss[0]))
        return losses


def run():
    n = jax.local_device_count()
    x = np.random.RandomState(0).normal(size=(n, 4, 3)).astype(np.float32)
    trainer = Trainer(0.1)
    trainer.init(n)
    losses = trainer.fit(x, 3)
    return {"w": np.asarray(trainer.w), "losses": np.asarray(losses)}
