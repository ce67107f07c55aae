"""Modelled on google-deepmind/acme's JAX IMPALA agent: the learner, its builder's dataset
iterator and acme's JAX utilities.

Sources: github.com/google-deepmind/acme, acme/agents/jax/impala/learning.py,
acme/agents/jax/impala/builder.py, acme/agents/jax/impala/networks.py,
acme/jax/losses/impala.py and acme/jax/utils.py at commit
8d4cc040db23f14da88124a34b35158084ab752a (2024-05-03, before acme's "[pmap]" migration
commits). The package keeps the sources' split: `learning.py` holds the learner class
with its pmapped `sgd_step`, `jax_utils.py` acme's device helpers, `losses.py` the
V-trace loss factory, `networks.py` the network and optimiser, and this module the
builder's iterator and the driving loop (acme's experiment runner, reduced to a loop).
reverb, haiku, optax, rlax, loggers and actors are not used: the replay samples are
seeded numpy sequences from a behaviour policy, the network a feed-forward torso with a
carried dummy core state. All code here is written anew.

pmap features kept:
- a learner class whose `__init__` builds `jax.pmap(sgd_step, axis_name="data",
  devices=self._devices)` of a nested `@jax.jit` step closing over the loss and the
  optimiser, with a `lax.pmean` of the gradients; the state is a NamedTuple replicated
  by `jax.device_put_sharded([state] * n, devices)` and fed back each step;
- samples pulled `jax.local_device_count()` at a time from the host iterator and placed
  by `jax.device_put_sharded` (the builder's `multi_device_put`), each device's batch
  `batch_size // jax.device_count()` sequences;
- metrics read from the first replica only (`x[0]` then `device_get`) into a logger;
  `get_variables` returning the first replica as device arrays; `save()` the first
  replica on the host and `restore()` into a second learner through the replicate
  helper, which then keeps training.

Scaled down: 6-feature observations, 3 actions, sequences of 5 steps, 2 sequences per
device, 4 steps then a save / restore and 2 more.

The original needs jax 0.4.38 (`jax.device_put_sharded` is gone from jax 0.10).
"""
from typing import Any, NamedTuple

import jax
import numpy as np

from acme_impala import jax_utils as utils
from acme_impala import learning
from acme_impala import networks as impala_networks


class ReplaySample(NamedTuple):
    info: Any
    data: Any


class Step(NamedTuple):
    observation: Any
    action: Any
    reward: Any
    discount: Any
    extras: Any


class IMPALAConfig(NamedTuple):
    batch_size: int
    sequence_length: int = 5
    learning_rate: float = 3e-2
    discount: float = 0.95
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    max_abs_reward: float = 1.0


def replay_sequences(seed, batch_size, sequence_length):
    """Behaviour-policy sequences as a replay table would hand them out, one batch a call."""
    rng = np.random.RandomState(seed)
    obs_dim, num_actions = impala_networks.OBS, impala_networks.NUM_ACTIONS
    while True:
        shape = (batch_size, sequence_length)
        observation = rng.normal(size=shape + (obs_dim,)).astype(np.float32)
        logits = rng.normal(size=shape + (num_actions,)).astype(np.float32)
        probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        action = (probs.cumsum(-1) > rng.uniform(size=shape + (1,))).argmax(-1).astype(np.int32)
        reward = (observation[..., 0] * (action == 1) - 0.1 * action).astype(np.float32)
        discount = (rng.uniform(size=shape) > 0.1).astype(np.float32)
        core_state = {"bias": np.zeros(shape + (impala_networks.HIDDEN,), np.float32)}
        data = Step(observation, action, reward, discount,
                    {"logits": logits, "core_state": core_state})
        info = {"probability": np.full((batch_size,), 1.0 / batch_size, np.float32)}
        yield ReplaySample(info, data)


def make_dataset_iterator(config, seed):
    batch_size_per_device, ragged = divmod(config.batch_size, jax.device_count())
    if ragged:
        raise ValueError("Learner batch size must be divisible by total number of devices!")
    dataset = replay_sequences(seed, batch_size_per_device, config.sequence_length)
    return utils.multi_device_put(dataset, jax.local_devices())


def make_learner(config, networks, iterator, random_key, logger):
    return learning.IMPALALearner(
        networks=networks,
        iterator=iterator,
        optimizer=impala_networks.clipped_rmsprop(config.learning_rate),
        random_key=random_key,
        discount=config.discount,
        entropy_cost=config.entropy_cost,
        baseline_cost=config.baseline_cost,
        max_abs_reward=config.max_abs_reward,
        logger=logger,
    )


def run():
    config = IMPALAConfig(batch_size=2 * jax.device_count())
    networks = impala_networks.make_networks()
    iterator = make_dataset_iterator(config, seed=0)

    logger = learning.ListLogger()
    learner = make_learner(config, networks, iterator, jax.random.PRNGKey(1), logger)
    for _ in range(4):
        learner.step()
    [policy_params] = learner.get_variables(["policy"])
    saved = learner.save()

    restored = make_learner(config, networks, iterator, jax.random.PRNGKey(2), logger)
    restored.restore(saved)
    for _ in range(2):
        restored.step()
    final = restored.save()

    keys = ("loss", "policy_loss", "critic_loss", "entropy", "param_norm", "steps")
    return {
        "log": np.asarray([[row[k] for k in keys] for row in logger.rows], np.float64),
        "policy_at_save": np.asarray(policy_params["policy"]),
        "saved_nu_value": np.asarray(saved.opt_state["nu"]["value"]),
        "final_torso": np.asarray(final.params["torso"]),
        "final_value": np.asarray(final.params["value"]),
        "replicas_value": np.asarray(restored._state.params["value"]),
    }
