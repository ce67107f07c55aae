"""Modelled on evojax/obs_norm.py (@ acf5252475e4): running mean / variance packed in one
flat parameter vector `[steps, mean..., var...]`, normalisation with clipping, and the
masked update from a rollout's observation buffer shaped (steps, jobs, obs). Written
anew."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def normalize(obs, obs_params, obs_shape, clip_value, std_min_value, std_max_value):
    obs_steps = obs_params[0]
    running_mean, running_var = jnp.split(obs_params[1:], 2)
    running_mean = running_mean.reshape(obs_shape)
    running_var = running_var.reshape(obs_shape)
    variance = jnp.clip(running_var / (obs_steps + 1.0), std_min_value, std_max_value)
    return jnp.clip((obs - running_mean) / jnp.sqrt(variance), -clip_value, clip_value)


def update_obs_params(obs_buffer, obs_mask, obs_params):
    obs_steps = obs_params[0]
    running_mean, running_var = jnp.split(obs_params[1:], 2)
    if obs_mask.ndim != obs_buffer.ndim:
        obs_mask = obs_mask.reshape(obs_mask.shape + (1,) * (obs_buffer.ndim - obs_mask.ndim))
    new_steps = jnp.sum(obs_mask)
    total_steps = obs_steps + new_steps
    input_to_old_mean = (obs_buffer - running_mean) * obs_mask
    new_mean = running_mean + jnp.sum(input_to_old_mean / total_steps, axis=(0, 1))
    input_to_new_mean = (obs_buffer - new_mean) * obs_mask
    new_var = running_var + jnp.sum(input_to_new_mean * input_to_old_mean, axis=(0, 1))
    return jnp.concatenate([jnp.ones(1) * total_steps, new_mean, new_var])


class ObsNormalizer:
    def __init__(self, obs_shape, clip_value=5.0, std_min_value=1e-6, std_max_value=1e6,
                 dummy=False):
        self._obs_shape = obs_shape
        self._obs_size = int(np.prod(obs_shape))
        self._std_min_value, self._std_max_value = std_min_value, std_max_value
        self._clip_value = clip_value
        self.is_dummy = dummy

    @functools.partial(jax.jit, static_argnums=(0,))
    def normalize_obs(self, obs, obs_params):
        if self.is_dummy:
            return obs
        return normalize(obs, obs_params, self._obs_shape, self._clip_value,
                         self._std_min_value, self._std_max_value)

    @functools.partial(jax.jit, static_argnums=(0,))
    def update_normalization_params(self, obs_buffer, obs_mask, obs_params):
        if self.is_dummy:
            return obs_params
        obs_shape = obs_buffer.shape[-len(self._obs_shape):]
        obs_buffer = obs_buffer.reshape((obs_buffer.shape[0], -1) + tuple(obs_shape))
        return update_obs_params(obs_buffer, obs_mask, obs_params)

    def get_init_params(self):
        return jnp.zeros(1 + self._obs_size * 2)
