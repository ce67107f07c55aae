"""Modelled on evojax's MLP policy (evojax/policy/mlp.py @ acf5252475e4): one flat parameter
vector per job, unflattened and applied under `jax.vmap`; `PolicyState` carries a key per
job and `reset` builds it from the task state. Written anew."""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass, data_fields=["keys"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class PolicyState:
    keys: Any


class MLPPolicy:
    def __init__(self, input_dim, hidden_dim, output_dim):
        self.shapes = [(input_dim, hidden_dim), (hidden_dim,), (hidden_dim, output_dim),
                       (output_dim,)]
        self.num_params = int(sum(np.prod(s) for s in self.shapes))

        def forward(flat, obs):
            parts, offset = [], 0
            for shape in self.shapes:
                size = int(np.prod(shape))
                parts.append(flat[offset:offset + size].reshape(shape))
                offset += size
            w1, b1, w2, b2 = parts
            return jnp.tanh(jnp.tanh(obs @ w1 + b1) @ w2 + b2)

        self._forward_fn = jax.vmap(forward)

    def reset(self, states):
        keys = jax.random.split(jax.random.PRNGKey(0), states.obs.shape[0])
        return PolicyState(keys=keys)

    def get_actions(self, t_states, params, p_states):
        return self._forward_fn(params, t_states.obs), p_states


def init_scale(num_params):
    return 1.0 / math.sqrt(num_params)
