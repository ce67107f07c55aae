"""A method of the record's own class in the mapped body: `state.apply_gradients(grads=g)` of a
replicated state, with pmean'd grads, builds the next state from replicated values only (the
method reads no device), so the step's first result is replicated (out_specs P()) and the loop
feeds it back as a global value; the per-device keys, a result of their own, keep their device
axis (a body returning a tuple: each result its own layout)."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass, data_fields=["step", "w"], meta_fields=["lr"])
@dataclasses.dataclass(frozen=True)
class State:
    step: Any
    w: Any
    lr: float

    def apply_gradients(self, *, grads):
        return dataclasses.replace(self, step=self.step + 1, w=self.w - self.lr * grads)


def train_step(state, x, key):
    key, sub = jax.random.split(key)
    noise = 0.01 * jax.random.normal(sub, x.shape)
    grads = jax.lax.pmean(jnp.mean(x + noise, axis=0) - state.w, "batch")
    loss = jax.lax.pmean(jnp.mean((x - state.w) ** 2), "batch")
    return state.apply_gradients(grads=grads), loss, key


def run():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    state = jax.device_put_replicated(State(step=0, w=jnp.zeros(3), lr=0.5), jax.local_devices())
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    rng = np.random.RandomState(0)
    losses = []
    for _ in range(3):
        state, loss, keys = p_train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32), keys)
        losses.append(float(loss[0]))
    host = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], state))
    return {"w": np.asarray(host.w), "step": np.asarray(host.step), "losses": np.asarray(losses),
            "keys": np.asarray(keys)}
