"""PM604: a record whose field's layout is unknown. The state is replicated, then its `step`
field is replaced by a value the analysis cannot place along pmap's device axis (a helper's
list of per-device counters): the step keeps pmap's calling contract, and the finding names
the field and the line that set it."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map, _device_put_replicated


@functools.partial(jax.tree_util.register_dataclass, data_fields=["step", "w"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class State:
    step: Any
    w: Any


def start_counts(n):
    return [0] * n


def train_step(state, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return dataclasses.replace(state, step=state.step + 1, w=state.w - 0.1 * grad)


def run():
    n = jax.local_device_count()
    p_train_step = jax.jit(
        _per_device_shard_map(train_step, "batch", in_specs=P("batch"), out_specs=P("batch"))
    )
    state = _device_put_replicated(State(step=0, w=jnp.zeros(3)), jax.local_devices())
    state = dataclasses.replace(state, step=np.asarray(start_counts(n)))
    rng = np.random.RandomState(0)
    for _ in range(2):
        state = p_train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32))
    return {"w": np.asarray(state.w), "step": np.asarray(state.step)}
