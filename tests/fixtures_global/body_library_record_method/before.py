"""flax's own `TrainState` (a library class, not the module's): `state.apply_gradients(grads=g)`
of the replicated state with pmean'd grads is replicated, as a call of flax's or optax's
functions on replicated values is, so the step returns it with out_specs P() and the loop feeds
it back as a global value. Not run here (flax's train_state needs optax, which the test
environments do not install); body_record_method_keeps_replication runs the same shape."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils
from flax.training import train_state


def train_step(state, x):
    def loss_fn(params):
        return jnp.mean((x @ params["w"]) ** 2)
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    grads = jax.lax.pmean(grads, "batch")
    new_state = state.apply_gradients(grads=grads)
    return new_state, jax.lax.pmean(loss, "batch")


def main():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    state = train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones((3, 2))},
                                          tx=optax.sgd(0.1))
    state = jax_utils.replicate(state)
    rng = np.random.RandomState(0)
    for _ in range(3):
        state, loss = p_train_step(state, rng.normal(size=(n, 2, 3)).astype(np.float32))
    return {"w": np.asarray(jax_utils.unreplicate(state).params["w"]), "loss": np.asarray(loss[0])}
