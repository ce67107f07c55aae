"""A method of the module's own class builds the replicated state: `State.create(...)` (a
classmethod returning `cls(...)`) makes a `State`, and its `replicate()` method is followed as
a helper is, with `self` that instance. `.replace(w=...)` of the replicated state by another
replicated value keeps every field replicated, so the step goes global and the state is a
replicated global value (device 0's copy is the value itself)."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass, data_fields=["step", "w"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class State:
    step: Any
    w: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    @classmethod
    def create(cls, w):
        return cls(step=0, w=w)

    def replicate(self):
        return jax.device_put_replicated(self, jax.local_devices())


def train_step(state, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return dataclasses.replace(state, step=state.step + 1, w=state.w - 0.1 * grad)


def run():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch")
    state = State.create(jnp.zeros(3))
    state = state.replicate()
    state = state.replace(w=jax.device_put_replicated(jnp.ones(3), jax.local_devices()))
    rng = np.random.RandomState(0)
    for _ in range(3):
        state = p_train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32))
    host = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], state))
    return {"w": np.asarray(host.w), "step": np.asarray(host.step)}
