"""A class-held donating step in `for _ in range(epochs)`, storing `old.is_deleted()` to an
attribute on every trip. The first trip donates the stack `init` made (pmap donated a copy and
keeps it, the migrated jit deletes it), but `fit` is called with epochs=3, nothing in the loop
reads `self.deleted`, and each trip overwrites it: only the last trip's flag survives, and by
then `old` is a step's own result, deleted in both. So the step goes global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def make_step(lr, axis_name="batch"):
    def loss_fn(w, x):
        return jnp.mean((x @ w - 1.0) ** 2)

    def step(w, x):
        loss, grad = jax.value_and_grad(loss_fn)(w, x)
        return w - lr * jax.lax.pmean(grad, axis_name), jax.lax.pmean(loss, axis_name)

    return jax.jit(jax.shard_map(
        step,
        mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False,
    ), donate_argnums=0)


class Trainer:
    def __init__(self, lr):
        self.step = make_step(lr)
        self.w = None

    def init(self, n):
        self.w = jax.device_put(jnp.zeros((3,)), NamedSharding(_mesh("batch"), P()))

    def fit(self, x, epochs):
        losses = []
        for _ in range(epochs):
            old = self.w
            self.w, loss = self.step(old, x)
            losses.append(float(loss))
            self.deleted = old.is_deleted()
        return losses


def run():
    n = jax.local_device_count()
    x = np.random.RandomState(0).normal(size=(n * 4, 3)).astype(np.float32)
    trainer = Trainer(0.1)
    trainer.init(n)
    losses = trainer.fit(x, epochs=3)
    return {"w": np.asarray(trainer.w), "losses": np.asarray(losses),
            "deleted": np.asarray(trainer.deleted)}
