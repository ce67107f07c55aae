"""Per-device batch statistics (not averaged by the step) and a replicated mean stored into a
copy of them: a tree of two layouts (tests/test_global_local_functions.py)."""
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
    stats = 0.9 * state.model_state["batch_stats"] + 0.1 * jnp.mean(x)
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
    return {"p": np.asarray(state.params[0]), "s": np.asarray(state.model_state["batch_stats"])}
