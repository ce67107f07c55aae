"""As body_record_method_keeps_replication, but the class's `apply_gradients` scales the update
by `axis_index`: the next state differs per device, so it is not provably replicated and the
state stays in pmap's stacked layout; the finding names the method that makes it per-device
(`State.apply_gradients`, and the line of the body's result)."""
# pmap-migrate-test: original needs legacy jax
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from _pmap_helpers import _device_put_replicated


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


@functools.partial(jax.tree_util.register_dataclass, data_fields=["step", "w"], meta_fields=["lr"])
@dataclasses.dataclass(frozen=True)
class State:
    step: Any
    w: Any
    lr: float

    def apply_gradients(self, *, grads):
        return dataclasses.replace(self, step=self.step + 1, w=self.w - self.lr * grads * (1 + jax.lax.axis_index("batch")))


def train_step(state, x, key):
    state = jax.tree.map(lambda y: jnp.squeeze(y, 0), state)
    key = jax.tree.map(lambda y: jnp.squeeze(y, 0), key)
    key, sub = jax.random.split(key)
    noise = 0.01 * jax.random.normal(sub, x.shape)
    grads = jax.lax.pmean(jnp.mean(x + noise, axis=0) - state.w, "batch")
    loss = jax.lax.pmean(jnp.mean((x - state.w) ** 2), "batch")
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0), (state.apply_gradients(grads=grads), loss, key)
    )


@functools.partial(jax.jit, donate_argnums=(0,))
def p_train_step(state, x, key):
    return jax.shard_map(
        train_step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch"), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(state, x, key)


def run():
    n = jax.local_device_count()
    state = _device_put_replicated(State(step=0, w=jnp.zeros(3), lr=0.5), jax.local_devices())
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    rng = np.random.RandomState(0)
    losses = []
    for _ in range(3):
        state, loss, keys = p_train_step(
            state, rng.normal(size=(n * 2, 3)).astype(np.float32), keys
        )
        losses.append(float(loss[0]))
    host = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], state))
    return {"w": np.asarray(host.w), "step": np.asarray(host.step), "losses": np.asarray(losses),
            "keys": np.asarray(keys)}
