"""Modelled on mava/evaluator.py (instadeepai/Mava @ 01ece2b9403c): `get_ff_evaluator_fn`
builds `evaluator_fn(trained_params, key)` that resets `num_eval_episodes // n_devices`
episodes (`n_devices = len(jax.devices())`) and runs each with a `lax.while_loop` under a
`jax.vmap(..., in_axes=(None, 0), axis_name="eval_batch")`; `make_eval_fns` returns
`jax.pmap(evaluator, axis_name="device")` and the same for the absolute-metric evaluator
(10x episodes), both built in a factory and returned to the caller. Written anew."""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import mava_ff_ippo.env as environment


class EvalState(NamedTuple):
    key: Any
    env_state: Any
    timestep: Any
    step_count: Any
    episode_return: Any


class ExperimentOutput(NamedTuple):
    learner_state: Any
    episode_metrics: Any
    train_metrics: Any


def get_ff_evaluator_fn(env, apply_fn, config, eval_multiplier=1):
    def eval_one_episode(params, init_eval_state):
        def _env_step(eval_state):
            key, env_state, last_timestep, step_count, episode_return = eval_state
            key, policy_key = jax.random.split(key)
            pi = apply_fn(params, jax.tree_util.tree_map(lambda x: x[jnp.newaxis, ...],
                                                         last_timestep.observation))
            if config["evaluation_greedy"]:
                action = pi.mode()
            else:
                action = pi.sample(seed=policy_key)
            action = jnp.squeeze(action, axis=0)
            env_state, timestep = env.step(env_state, action)
            episode_return += timestep.reward
            step_count += 1
            return EvalState(key, env_state, timestep, step_count, episode_return)

        def not_done(carry):
            return ~carry[2].last()

        final_state = jax.lax.while_loop(not_done, _env_step, init_eval_state)
        return {"episode_return": final_state.episode_return,
                "episode_length": final_state.step_count}

    def evaluator_fn(trained_params, key):
        n_devices = len(jax.devices())
        eval_batch = (config["num_eval_episodes"] // n_devices) * eval_multiplier
        key, *env_keys = jax.random.split(key, eval_batch + 1)
        env_states, timesteps = jax.vmap(env.reset)(jnp.stack(env_keys))
        key, *step_keys = jax.random.split(key, eval_batch + 1)
        step_keys = jnp.stack(step_keys).reshape(eval_batch, -1)
        eval_state = EvalState(key=step_keys, env_state=env_states, timestep=timesteps,
                               step_count=jnp.zeros((eval_batch, 1)),
                               episode_return=jnp.zeros_like(timesteps.reward))
        eval_metrics = jax.vmap(eval_one_episode, in_axes=(None, 0),
                                axis_name="eval_batch")(trained_params, eval_state)
        return ExperimentOutput(learner_state=eval_state, episode_metrics=eval_metrics,
                                train_metrics={})

    return evaluator_fn


def make_eval_fns(eval_env, network_apply_fn, config):
    evaluator = get_ff_evaluator_fn(eval_env, network_apply_fn, config)
    absolute_metric_evaluator = get_ff_evaluator_fn(eval_env, network_apply_fn, config, 10)
    evaluator = jax.pmap(evaluator, axis_name="device")
    absolute_metric_evaluator = jax.pmap(absolute_metric_evaluator, axis_name="device")
    return evaluator, absolute_metric_evaluator


class EnvModule:
    """The evaluation environment as an object with `reset` / `step`."""
    reset = staticmethod(environment.reset)
    step = staticmethod(environment.step)
