"""Modelled on acme/agents/jax/impala/networks.py (google-deepmind/acme @ 8d4cc040db23):
an `IMPALANetworks` holder of `init(key)` and `unroll(params, rng, observations, state)`.
Here a feed-forward torso with policy and value heads unrolled over time, and a dummy
recurrent state carried through unchanged; and the RMSProp-with-clipping optimiser the
agent builds with optax, as an `init` / `update` pair. Written anew."""
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

OBS = 6
HIDDEN = 16
NUM_ACTIONS = 3


class IMPALANetworks(NamedTuple):
    init: Callable
    unroll: Callable
    initial_state: Callable


def make_networks():
    def init(key):
        k1, k2, k3 = jax.random.split(key, 3)
        return {"torso": jax.random.normal(k1, (OBS, HIDDEN)) / jnp.sqrt(OBS),
                "policy": jax.random.normal(k2, (HIDDEN, NUM_ACTIONS)) * 0.1,
                "value": jax.random.normal(k3, (HIDDEN,)) * 0.1}

    def unroll(params, rng, observations, state):
        del rng
        h = jnp.tanh(observations @ params["torso"] + state["bias"])
        return (h @ params["policy"], h @ params["value"]), state

    def initial_state(batch_size):
        return {"bias": jnp.zeros((batch_size, HIDDEN))}

    return IMPALANetworks(init, unroll, initial_state)


class Optimizer(NamedTuple):
    init: Callable
    update: Callable


def clipped_rmsprop(learning_rate, max_norm=1.0, decay=0.99, eps=1e-5):
    def init(params):
        return {"nu": jax.tree_util.tree_map(jnp.zeros_like, params)}

    def update(grads, state):
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        scale = jnp.minimum(1.0, max_norm / (norm + 1e-12))
        grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
        nu = jax.tree_util.tree_map(lambda n, g: decay * n + (1 - decay) * g * g, state["nu"], grads)
        updates = jax.tree_util.tree_map(lambda g, n: -learning_rate * g / jnp.sqrt(n + eps),
                                         grads, nu)
        return updates, {"nu": nu}

    return Optimizer(init, update)
