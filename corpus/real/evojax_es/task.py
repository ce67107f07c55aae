"""Modelled on evojax's `VectorizedTask` (evojax/task/base.py) with a small task in the
shape of its classic-control tasks (google/evojax @ acf5252475e4): a pytree-dataclass
`TaskState` with `replace`, `reset(keys)` and `step(state, action)` vmapped over the jobs.
The task: steer a point mass in 2-D to a random goal. Written anew."""
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["obs", "pos", "vel", "goal", "steps"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class TaskState:
    obs: Any
    pos: Any
    vel: Any
    goal: Any
    steps: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)


def _observe(pos, vel, goal):
    return jnp.concatenate([pos, vel, goal - pos])


class PointMassTask:
    multi_agent_training = False
    obs_shape = (6,)
    act_shape = (2,)

    def __init__(self, max_steps=12, test=False):
        self.max_steps = max_steps
        self.test = test

        def reset_fn(key):
            k1, k2 = jax.random.split(key)
            pos = jax.random.uniform(k1, (2,), minval=-1.0, maxval=1.0)
            goal = jax.random.uniform(k2, (2,), minval=-1.0, maxval=1.0)
            vel = jnp.zeros((2,))
            return TaskState(obs=_observe(pos, vel, goal), pos=pos, vel=vel, goal=goal,
                             steps=jnp.zeros((), jnp.int32))

        def step_fn(state, action):
            vel = 0.8 * state.vel + 0.2 * jnp.clip(action, -1.0, 1.0)
            pos = state.pos + 0.3 * vel
            dist = jnp.sqrt(jnp.sum((state.goal - pos) ** 2))
            reward = -dist - 0.01 * jnp.sum(action ** 2)
            steps = state.steps + 1
            done = jnp.where((dist < 0.05) | (steps >= max_steps), 1, 0)
            return state.replace(obs=_observe(pos, vel, state.goal), pos=pos, vel=vel,
                                 steps=steps), reward, done

        self._reset_fn = jax.jit(jax.vmap(reset_fn))
        self._step_fn = jax.jit(jax.vmap(step_fn))

    def reset(self, key):
        return self._reset_fn(key)

    def step(self, state, action):
        return self._step_fn(state, action)
