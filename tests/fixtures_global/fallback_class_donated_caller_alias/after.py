"""As class_held_donated_flag, but the creating function keeps `start = trainer.w` before `fit`
and reads it after: the stack `fit` donates on its first trip survives under pmap (it donated a
copy), the migrated jit deletes it. Faithful (PM609 at the read)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def make_step(lr, axis_name="batch"):
    def loss_fn(w, x):
        return jnp.mean((x @ w - 1.0) ** 2)

    def step(w, x):
        loss, grad = jax.value_and_grad(loss_fn)(w, x)
        return w - lr * jax.lax.pmean(grad, axis_name), jax.lax.pmean(loss, axis_name)

    return jax.jit(
        _per_device_shard_map(step, axis_name, in_specs=P(axis_name), out_specs=P(axis_name)),
        donate_argnums=0,
    )


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
            self.deleted = old.is_deleted()
        return losses


def run():
    n = jax.local_device_count()
    x = np.random.RandomState(0).normal(size=(n, 4, 3)).astype(np.float32)
    trainer = Trainer(0.1)
    trainer.init(n)
    start = trainer.w
    losses = trainer.fit(x, epochs=3)
    return {"w": np.asarray(trainer.w), "losses": np.asarray(losses),
            "deleted": np.asarray(trainer.deleted),
            "start_deleted": np.asarray(start.is_deleted())}
