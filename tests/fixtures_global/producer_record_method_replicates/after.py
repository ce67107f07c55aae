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
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


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
        return jax.device_put(self, NamedSharding(_mesh("batch"), P()))


def train_step(state, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return dataclasses.replace(state, step=state.step + 1, w=state.w - 0.1 * grad)


@jax.jit
def p_train_step(state, x):
    return jax.shard_map(
        train_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(state, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    state = State.create(jnp.zeros(3))
    state = state.replicate()
    state = state.replace(w=jax.device_put(jnp.ones(3), NamedSharding(mesh, P())))
    rng = np.random.RandomState(0)
    for _ in range(3):
        state = p_train_step(state, rng.normal(size=(n * 2, 3)).astype(np.float32))
    host = jax.device_get(state)
    return {"w": np.asarray(host.w), "step": np.asarray(host.step)}
