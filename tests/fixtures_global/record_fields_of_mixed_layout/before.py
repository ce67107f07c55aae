"""A train state whose fields differ in layout. Its `replicate()` method (followed: the state
is made by the classmethod `State.create`, which returns `cls(...)`) replicates the whole
state, then `.replace(key=...)` gives each device its own RNG key (one row per device). The
analysis tracks each field: `key` per-device (set at line 36), every other replicated. The
step goes global with a spec of the state's own shape, built in its jitted def from the
argument (`jax.tree.map(lambda _: P(), state).replace(key=P("batch"))`), for in_specs and
out_specs alike: the body gives the state back rebuilt with `key` still its only per-device
field. `key` keeps pmap's stacked layout, squeezed on entry and expanded at the return."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["step", "w", "key"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class State:
    step: Any
    w: Any
    key: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    @classmethod
    def create(cls, w, key):
        return cls(step=0, w=w, key=key)

    def replicate(self):
        n = jax.local_device_count()
        stacked = jax.device_put_replicated(self, jax.local_devices())
        return stacked.replace(key=jax.random.split(self.key, n))


def train_step(state, x):
    key, next_key = jax.random.split(state.key)
    noise = jax.random.normal(key, x.shape)
    grad = jax.lax.pmean(jnp.mean(x + 0.01 * noise, axis=0), "batch")
    return state.replace(step=state.step + 1, w=state.w - 0.1 * grad, key=next_key)


def run():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch")
    state = State.create(jnp.zeros(3), jax.random.PRNGKey(0)).replicate()
    rng = np.random.RandomState(0)
    for _ in range(3):
        state = p_train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32))
    return {"w": np.asarray(state.w[0]), "step": np.asarray(state.step[0]),
            "key": np.asarray(state.key)}
