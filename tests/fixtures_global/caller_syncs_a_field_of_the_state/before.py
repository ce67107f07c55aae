"""scenic's batch-statistics sync: `if tree_leaves(train_state.model_state):` (a list read
for its length only), a copy `dict(train_state.model_state)` whose "batch_stats" entry is
replaced by a pmapped mean of the replicated state's own entry (a value of the tree's own
layout stored into it keeps the tree's layout), and `train_state.replace(model_state=...)`
of the frozen dataclass state. The sync is read inside `run`, which calls it: every site goes
global, the state stays replicated."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["params", "model_state"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class TrainState:
    params: Optional[Any] = None
    model_state: Optional[Any] = None

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)


@functools.partial(jax.pmap, axis_name="x")
def pmap_mean(x):
    return jax.lax.pmean(x, "x")


def sync_model_state_across_replicas(train_state):
    if jax.tree_util.tree_leaves(train_state.model_state):
        new_model_state = dict(train_state.model_state)
        new_model_state["batch_stats"] = pmap_mean(train_state.model_state["batch_stats"])
        return train_state.replace(model_state=new_model_state)
    return train_state


@functools.partial(jax.pmap, axis_name="batch")
def train_step(state, x):
    stats = jax.lax.pmean(0.9 * state.model_state["batch_stats"] + 0.1 * jnp.mean(x), "batch")
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return state.replace(params=state.params - 0.1 * grad, model_state={"batch_stats": stats})


def run():
    n = jax.local_device_count()
    state = TrainState(params=jnp.zeros(3), model_state={"batch_stats": jnp.zeros(())})
    state = jax.device_put_replicated(state, jax.local_devices())
    rng = np.random.RandomState(0)
    for _ in range(3):
        state = train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32))
    state = sync_model_state_across_replicas(state)
    host = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], state))
    return {"p": np.asarray(host.params), "s": np.asarray(host.model_state["batch_stats"])}
