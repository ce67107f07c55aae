"""flax's own `TrainState` (a library class, not the module's): `state.apply_gradients(grads=g)`
of the replicated state with pmean'd grads is replicated, as a call of flax's or optax's
functions on replicated values is, so the step returns it with out_specs P() and the loop feeds
it back as a global value. Not run here (flax's train_state needs optax, which the test
environments do not install); body_record_method_keeps_replication runs the same shape."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def train_step(state, x):
    def loss_fn(params):
        return jnp.mean((x @ params["w"]) ** 2)
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    grads = jax.lax.pmean(grads, "batch")
    new_state = state.apply_gradients(grads=grads)
    return new_state, jax.lax.pmean(loss, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def p_train_step(state, x):
    return jax.shard_map(
        train_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(state, x)


def main():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    state = train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones((3, 2))},
                                          tx=optax.sgd(0.1))
    state = jax.device_put(jax.tree.map(jnp.copy, state), NamedSharding(mesh, P()))
    rng = np.random.RandomState(0)
    for _ in range(3):
        state, loss = p_train_step(state, rng.normal(size=(n * 2, 3)).astype(np.float32))
    return {"w": np.asarray(state.params["w"]), "loss": np.asarray(loss)}
