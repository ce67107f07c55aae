"""A NamedTuple state whose fields differ in layout: replicated whole, then `._replace(rng=...)`
gives each device its own RNG key (`jax.random.split(key, n)`, one row per device). The step
goes global with a spec of the state's own shape, written with `._replace` as the program
writes it (`jax.tree.map(lambda _: P(), state)._replace(rng=P("batch"))`), for in_specs and
out_specs alike; `params` is a dict (a tree: P() on each of its leaves). `rng` keeps pmap's
stacked layout, squeezed on entry and expanded in the `._replace` the body returns."""
# pmap-migrate-test: original needs legacy jax
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class TrainState(NamedTuple):
    step: Any
    params: Any
    rng: Any


def train_step(state, batch):
    rng, dropout = jax.random.split(state.rng)
    keep = jax.random.bernoulli(dropout, 0.9, batch.shape)

    def loss(params):
        h = jnp.where(keep, batch, 0.0) @ params["w"] + params["b"]
        return jnp.mean(h ** 2)

    grads = jax.lax.pmean(jax.grad(loss)(state.params), "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, state.params, grads)
    return state._replace(step=state.step + 1, params=params, rng=rng)


def run():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch")
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    state = jax.device_put_replicated(TrainState(0, params, jax.random.PRNGKey(0)),
                                      jax.local_devices())
    state = state._replace(rng=jax.random.split(jax.random.PRNGKey(1), n))
    data = np.random.RandomState(0)
    for _ in range(3):
        state = p_train_step(state, data.normal(size=(n, 4, 3)).astype(np.float32))
    return {"w": np.asarray(state.params["w"][0]), "b": np.asarray(state.params["b"][0]),
            "step": np.asarray(state.step[0]), "rng": np.asarray(state.rng)}
