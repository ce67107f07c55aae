"""An acme-style learner: `__init__` maps a nested `sgd_step` with donate_argnums=0 and starts
from a stack of its initial state, and `step` replaces the state with the step's own results,
`self._state, loss = self._sgd_step(self._state, batch)`. The stack is donated on the first
step and never read again (only the attribute held it, and the step's results overwrite it);
later steps donate the step's own results, which pmap deletes too. So the step goes global."""
import jax
import jax.numpy as jnp
import numpy as np


def _loss(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


class Learner:
    def __init__(self, n, learning_rate):
        def sgd_step(state, batch):
            loss, grads = jax.value_and_grad(_loss)(state["params"], batch)
            grads = jax.lax.pmean(grads, "devices")
            params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g,
                                            state["params"], grads)
            new_state = {"params": params, "steps": state["steps"] + 1}
            return new_state, jax.lax.pmean(loss, "devices")

        self._sgd_step = jax.pmap(sgd_step, axis_name="devices", donate_argnums=0)
        params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
        state = {"params": params, "steps": jnp.zeros((), jnp.int32)}
        self._state = jax.tree_util.tree_map(lambda a: jnp.stack([a] * n), state)

    def step(self, batch):
        self._state, loss = self._sgd_step(self._state, batch)
        return loss

    def get_state(self):
        return self._state


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    learner = Learner(n, 0.1)
    losses = []
    for _ in range(3):
        x = rng.normal(size=(n, 4, 3)).astype(np.float32)
        y = rng.normal(size=(n, 4)).astype(np.float32)
        loss = learner.step((x, y))
        losses.append(float(loss[0]))
    state = learner.get_state()
    return {"w": np.asarray(state["params"]["w"]), "steps": np.asarray(state["steps"]),
            "losses": np.asarray(losses)}
