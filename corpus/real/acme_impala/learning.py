"""Modelled on acme/agents/jax/impala/learning.py (google-deepmind/acme @ 8d4cc040db23):
`IMPALALearner.__init__` picks its devices (`devices or jax.local_devices()`, the local
ones among them), builds the loss from the networks, defines a nested `@jax.jit`
`sgd_step` that `lax.pmean`s the gradients over the learner's axis before the optimiser
update, replicates the initial training state with `replicate_in_all_devices` onto the
local devices, and binds `self._sgd_step = jax.pmap(sgd_step, axis_name=_PMAP_AXIS_NAME,
devices=self._devices)`. `step()` pulls a device-sharded sample, runs the step and logs
the first replica's metrics (`get_from_first_device`); `get_variables` returns the first
replica's params as device arrays (`as_numpy=False`); `save` / `restore` go through the
first replica and back through `replicate_in_all_devices`. Written anew."""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from acme_impala import jax_utils as utils
from acme_impala import losses

_PMAP_AXIS_NAME = "data"


class TrainingState(NamedTuple):
    """Training state consists of network parameters and optimiser state."""
    params: Any
    opt_state: Any


def global_norm(tree):
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))


def apply_updates(params, updates):
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)


class Counter:
    def __init__(self):
        self._counts = {}

    def increment(self, **counts):
        for key, value in counts.items():
            self._counts[key] = self._counts.get(key, 0) + value
        return dict(self._counts)


class ListLogger:
    def __init__(self):
        self.rows = []

    def write(self, values):
        self.rows.append(dict(values))


class IMPALALearner:
    """Learner for an importance-weighted advantage actor-critic."""

    def __init__(self, networks, iterator, optimizer, random_key, discount=0.99,
                 entropy_cost=0.0, baseline_cost=1.0, max_abs_reward=float("inf"),
                 counter=None, logger=None, devices=None):
        local_devices = jax.local_devices()
        self._devices = devices or local_devices
        self._local_devices = [d for d in self._devices if d in local_devices]
        self._iterator = iterator

        def unroll_without_rng(params, observations, initial_state):
            unused_rng = jax.random.PRNGKey(0)
            return networks.unroll(params, unused_rng, observations, initial_state)

        loss_fn = losses.impala_loss(
            unroll_fn=unroll_without_rng,
            discount=discount,
            max_abs_reward=max_abs_reward,
            baseline_cost=baseline_cost,
            entropy_cost=entropy_cost)

        @jax.jit
        def sgd_step(state, sample):
            """Computes an SGD step, returning new state and metrics for logging."""
            grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
            (loss_value, metrics), gradients = grad_fn(state.params, sample)
            # Average gradients over pmap replicas before the optimiser update.
            gradients = jax.lax.pmean(gradients, _PMAP_AXIS_NAME)
            updates, new_opt_state = optimizer.update(gradients, state.opt_state)
            new_params = apply_updates(state.params, updates)
            metrics.update({
                "loss": loss_value,
                "param_norm": global_norm(new_params),
                "param_updates_norm": global_norm(updates),
            })
            return TrainingState(params=new_params, opt_state=new_opt_state), metrics

        def make_initial_state(key):
            initial_params = networks.init(key)
            return TrainingState(params=initial_params, opt_state=optimizer.init(initial_params))

        state = make_initial_state(random_key)
        self._state = utils.replicate_in_all_devices(state, self._local_devices)

        self._sgd_step = jax.pmap(sgd_step, axis_name=_PMAP_AXIS_NAME, devices=self._devices)

        self._counter = counter or Counter()
        self._logger = logger or ListLogger()

    def step(self):
        """Does a step of SGD and logs the results."""
        samples = next(self._iterator)
        self._state, results = self._sgd_step(self._state, samples)
        # Take results from the first replica (a noisy estimate: no pmean over devices).
        results = utils.get_from_first_device(results)
        counts = self._counter.increment(steps=1)
        self._logger.write({**results, **counts})

    def get_variables(self, names):
        del names
        return utils.get_from_first_device([self._state.params], as_numpy=False)

    def save(self):
        return utils.get_from_first_device(self._state)

    def restore(self, state):
        self._state = utils.replicate_in_all_devices(state, self._local_devices)
