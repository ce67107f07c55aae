"""Modelled on evojax/sim_mgr.py (google/evojax @ acf5252475e4): the simulation manager.

pmap features kept: in `SimManager.__init__`, nested `step_once` / `rollout` defs (a
`lax.scan` over the task's steps) bound with `functools.partial(rollout,
step_once_fn=partial(step_once, task=...), max_steps=...)`, then, only when there is more
than one device, `self._train_rollout_fn = jax.jit(jax.pmap(self._train_rollout_fn,
in_axes=(0, 0, 0, None)))` (a jit wrapped around a pmap, the observation-normaliser
params broadcast with `None`), the same for validation; no collectives. Around the call,
module-level `@jax.jit` helpers split the population onto the devices
(`jnp.stack(jnp.split(param, jax.local_device_count()))`, also tree-mapped over the task
and policy states) and merge the results back (a transpose-and-reshape of the observation
buffer and masks, a reshape of the final states); the scores are averaged over repeats on
the host side. Written anew, without the for-loop and multi-agent paths."""
from functools import partial

import jax
import jax.numpy as jnp
from jax import random
from jax.tree_util import tree_map

from evojax_es.obs_norm import ObsNormalizer


@partial(jax.jit, static_argnums=(1, 2, 3, 4))
def get_task_reset_keys(key, test, pop_size, n_tests, n_repeats):
    key, subkey = random.split(key=key)
    if test:
        reset_keys = random.split(subkey, n_tests * n_repeats)
    else:
        reset_keys = random.split(subkey, n_repeats)
        reset_keys = jnp.tile(reset_keys, (pop_size, 1))
    return key, reset_keys


@jax.jit
def split_params_for_pmap(param):
    return jnp.stack(jnp.split(param, jax.local_device_count()))


@jax.jit
def split_states_for_pmap(state):
    return tree_map(split_params_for_pmap, state)


@jax.jit
def reshape_data_from_pmap(data):
    # data.shape = (#device, steps, #jobs/device, *)
    data = data.transpose([1, 0] + [i for i in range(2, data.ndim)])
    return jnp.reshape(data, (data.shape[0], data.shape[1] * data.shape[2], -1))


@jax.jit
def merge_state_from_pmap(state):
    return tree_map(lambda x: x.reshape((x.shape[0] * x.shape[1], *x.shape[2:])), state)


@partial(jax.jit, static_argnums=(1,))
def duplicate_params(params, repeats):
    return jnp.repeat(params, repeats=repeats, axis=0)


class SimManager:
    def __init__(self, n_repeats, test_n_repeats, pop_size, n_evaluations, policy_net,
                 train_vec_task, valid_vec_task, seed=0, obs_normalizer=None):
        self._key = random.PRNGKey(seed=seed)
        self._n_repeats = n_repeats
        self._test_n_repeats = test_n_repeats
        self._pop_size = pop_size
        self._n_evaluations = max(n_evaluations, jax.local_device_count())
        self.obs_normalizer = obs_normalizer
        if self.obs_normalizer is None:
            self.obs_normalizer = ObsNormalizer(obs_shape=train_vec_task.obs_shape, dummy=True)
        self.obs_params = self.obs_normalizer.get_init_params()

        self._num_device = jax.local_device_count()
        if self._pop_size % self._num_device != 0:
            raise ValueError("pop_size must be multiples of GPU/TPUs")
        if self._n_evaluations % self._num_device != 0:
            raise ValueError("n_evaluations must be multiples of GPU/TPUs")

        def step_once(carry, input_data, task):
            (task_state, policy_state, params, obs_params,
             accumulated_reward, valid_mask) = carry
            org_obs = task_state.obs
            normed_obs = self.obs_normalizer.normalize_obs(org_obs, obs_params)
            task_state = task_state.replace(obs=normed_obs)
            actions, policy_state = policy_net.get_actions(task_state, params, policy_state)
            task_state = task_state.replace(obs=org_obs)
            task_state, reward, done = task.step(task_state, actions)
            accumulated_reward = accumulated_reward + reward * valid_mask
            valid_mask = valid_mask * (1 - done.ravel())
            return ((task_state, policy_state, params, obs_params,
                     accumulated_reward, valid_mask), (org_obs, valid_mask))

        def rollout(task_states, policy_states, params, obs_params, step_once_fn, max_steps):
            accumulated_rewards = jnp.zeros(params.shape[0])
            valid_masks = jnp.ones(params.shape[0])
            ((task_states, policy_states, params, obs_params,
              accumulated_rewards, valid_masks),
             (obs_set, obs_mask)) = jax.lax.scan(
                step_once_fn,
                (task_states, policy_states, params, obs_params,
                 accumulated_rewards, valid_masks), (), max_steps)
            return accumulated_rewards, obs_set, obs_mask, task_states

        self._policy_reset_fn = jax.jit(policy_net.reset)

        self._train_reset_fn = train_vec_task.reset
        self._train_rollout_fn = partial(
            rollout, step_once_fn=partial(step_once, task=train_vec_task),
            max_steps=train_vec_task.max_steps)
        if self._num_device > 1:
            self._train_rollout_fn = jax.jit(jax.pmap(
                self._train_rollout_fn, in_axes=(0, 0, 0, None)))

        self._valid_reset_fn = valid_vec_task.reset
        self._valid_rollout_fn = partial(
            rollout, step_once_fn=partial(step_once, task=valid_vec_task),
            max_steps=valid_vec_task.max_steps)
        if self._num_device > 1:
            self._valid_rollout_fn = jax.jit(jax.pmap(
                self._valid_rollout_fn, in_axes=(0, 0, 0, None)))

    def eval_params(self, params, test):
        return self._scan_loop_eval(params, test)

    def _scan_loop_eval(self, params, test):
        policy_reset_func = self._policy_reset_fn
        if test:
            n_repeats = self._test_n_repeats
            task_reset_func = self._valid_reset_fn
            rollout_func = self._valid_rollout_fn
            params = duplicate_params(params[None, :], self._n_evaluations)
        else:
            n_repeats = self._n_repeats
            task_reset_func = self._train_reset_fn
            rollout_func = self._train_rollout_fn

        params = duplicate_params(params, n_repeats)
        self._key, reset_keys = get_task_reset_keys(
            self._key, test, self._pop_size, self._n_evaluations, n_repeats)

        task_state = task_reset_func(reset_keys)
        policy_state = policy_reset_func(task_state)
        if self._num_device > 1:
            params = split_params_for_pmap(params)
            task_state = split_states_for_pmap(task_state)
            policy_state = split_states_for_pmap(policy_state)

        scores, all_obs, masks, final_states = rollout_func(
            task_state, policy_state, params, self.obs_params)

        if self._num_device > 1:
            all_obs = reshape_data_from_pmap(all_obs)
            masks = reshape_data_from_pmap(masks)
            final_states = merge_state_from_pmap(final_states)

        if not test and not self.obs_normalizer.is_dummy:
            self.obs_params = self.obs_normalizer.update_normalization_params(
                obs_buffer=all_obs, obs_mask=masks, obs_params=self.obs_params)

        scores = jnp.mean(scores.ravel().reshape((-1, n_repeats)), axis=-1)
        final_states = tree_map(
            lambda x: x.reshape((scores.shape[0], n_repeats, *x.shape[1:])), final_states)
        return scores, final_states
