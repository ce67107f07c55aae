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
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["params", "model_state"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class TrainState:
    params: Optional[Any] = None
    model_state: Optional[Any] = None

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)


def _pmap_mean(x):
    return jax.lax.pmean(x, "x")


@jax.jit
def pmap_mean(x):
    return jax.shard_map(
        _pmap_mean, mesh=_mesh("x"), in_specs=(P(),), out_specs=P(), check_vma=False
    )(x)


def sync_model_state_across_replicas(train_state):
    if jax.tree_util.tree_leaves(train_state.model_state):
        new_model_state = dict(train_state.model_state)
        new_model_state["batch_stats"] = pmap_mean(train_state.model_state["batch_stats"])
        return train_state.replace(model_state=new_model_state)
    return train_state


def _train_step(state, x):
    stats = jax.lax.pmean(0.9 * state.model_state["batch_stats"] + 0.1 * jnp.mean(x), "batch")
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return state.replace(params=state.params - 0.1 * grad, model_state={"batch_stats": stats})


@jax.jit
def train_step(state, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(state, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    state = TrainState(params=jnp.zeros(3), model_state={"batch_stats": jnp.zeros(())})
    state = jax.device_put(state, NamedSharding(mesh, P()))
    rng = np.random.RandomState(0)
    for _ in range(3):
        state = train_step(state, rng.normal(size=(n * 2, 3)).astype(np.float32))
    state = sync_model_state_across_replicas(state)
    host = jax.device_get(state)
    return {"p": np.asarray(host.params), "s": np.asarray(host.model_state["batch_stats"])}
