"""A stand-in for the Jumanji / matrax environments Mava trains on: two agents, each sees a
4-feature observation and picks one of 3 actions; the reward is shared; episodes last 5
steps; timesteps carry `last()` and `extras["episode_metrics"]` as Mava's wrappers add
them. Written anew."""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

NUM_AGENTS = 2
OBS_DIM = 4
ACTION_DIM = 3
EPISODE_LENGTH = 5


class TimeStep(NamedTuple):
    observation: Any
    reward: Any
    step_type: Any
    extras: Any

    def last(self):
        return self.step_type == 2


class EnvState(NamedTuple):
    key: Any
    step_count: Any
    episode_return: Any
    hidden: Any


def _observe(hidden, step_count):
    phase = jnp.sin(step_count.astype(jnp.float32) + jnp.arange(NUM_AGENTS)[:, None])
    return jnp.concatenate([hidden, phase], axis=-1)


def reset(key):
    key, sub = jax.random.split(key)
    hidden = jax.random.normal(sub, (NUM_AGENTS, OBS_DIM - 1))
    step_count = jnp.zeros((), jnp.int32)
    state = EnvState(key, step_count, jnp.zeros(()), hidden)
    metrics = {"episode_return": jnp.zeros(()), "episode_length": step_count,
               "is_terminal_step": jnp.array(False)}
    return state, TimeStep(_observe(hidden, step_count), jnp.zeros((NUM_AGENTS,)),
                           jnp.zeros((), jnp.int32), {"episode_metrics": metrics})


def step(state, action):
    target = jnp.argmax(jnp.concatenate([state.hidden, -state.hidden.sum(-1, keepdims=True)], -1)[:, :ACTION_DIM], -1)
    team_reward = jnp.mean((action == target).astype(jnp.float32))
    reward = jnp.full((NUM_AGENTS,), team_reward)
    step_count = state.step_count + 1
    done = step_count >= EPISODE_LENGTH
    episode_return = state.episode_return + team_reward
    key, sub = jax.random.split(state.key)
    drift = 0.3 * jax.random.normal(sub, state.hidden.shape)
    new_hidden = jnp.where(done, jax.random.normal(key, state.hidden.shape), state.hidden + drift)
    metrics = {"episode_return": episode_return, "episode_length": step_count,
               "is_terminal_step": done}
    next_state = EnvState(key, jnp.where(done, 0, step_count),
                          jnp.where(done, 0.0, episode_return), new_hidden)
    step_type = jnp.where(done, 2, 1).astype(jnp.int32)
    obs = _observe(new_hidden, next_state.step_count)
    return next_state, TimeStep(obs, reward, step_type, {"episode_metrics": metrics})
