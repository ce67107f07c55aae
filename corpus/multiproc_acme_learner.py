"""An acme-style learner (acme/agents/jax/impala/learning.py shape), one per process.

The learner is given every device (`jax.devices()`) and keeps the ones of its own process,
`[d for d in devices if d.process_index == jax.process_index()]`; its pmapped SGD step is
built with `devices=devices`, so it spans all processes while each process feeds its local
devices. The learner's random key is made per process with `fold_in(key, process_index())`.
Results are read from the first local device (acme's `get_from_first_device`) and logged
on process 0 only. `run()` works with one process too.
"""
import jax
import jax.numpy as jnp
import numpy as np

_PMAP_AXIS_NAME = "data"


def get_from_first_device(nest):
    return jax.tree_util.tree_map(lambda x: np.asarray(x[0]), nest)


class Learner:
    def __init__(self, seed, devices=None):
        devices = devices or jax.devices()
        process_id = jax.process_index()
        self._local_devices = [d for d in devices if d.process_index == process_id]
        n = len(self._local_devices)

        def sgd_step(state, batch):
            def loss_fn(params):
                values = batch["obs"] @ params
                return jnp.mean((values - batch["reward"]) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(state["params"])
            grads = jax.lax.pmean(grads, _PMAP_AXIS_NAME)
            key, noise_key = jax.random.split(state["key"])
            noise = 0.001 * jax.random.normal(noise_key, grads.shape)
            new_state = {"params": state["params"] - 0.1 * grads + noise, "key": key,
                         "steps": state["steps"] + 1}
            return new_state, {"loss": jax.lax.pmean(loss, _PMAP_AXIS_NAME),
                               "steps": jax.lax.psum(1, _PMAP_AXIS_NAME)}

        self._sgd_step = jax.pmap(sgd_step, axis_name=_PMAP_AXIS_NAME, devices=devices)
        key = jax.random.fold_in(jax.random.PRNGKey(seed), jax.process_index())
        keys = jax.random.split(key, n)
        self._state = {"params": np.zeros((n, 3), np.float32), "key": keys,
                       "steps": np.zeros((n,), np.int32)}
        self._logged = []

    def step(self, batch):
        self._state, results = self._sgd_step(self._state, batch)
        results = get_from_first_device(results)
        if jax.process_index() == 0:
            self._logged.append(results["loss"])
        return results


def run():
    learner = Learner(seed=11)
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    for _ in range(3):
        obs = rng.normal(size=(n, 4, 3)).astype(np.float32)
        batch = {"obs": obs, "reward": obs.sum(-1)}
        results = learner.step(batch)
    return {
        "results": results,
        "logged": np.asarray(learner._logged, np.float32),
        "params": np.asarray(learner._state["params"]),
        "steps": np.asarray(learner._state["steps"]),
    }
