"""A NamedTuple state whose fields differ in layout: replicated whole, then `._replace(rng=...)`
gives each device its own RNG key (`jax.random.split(key, n)`, one row per device). The step
goes global with a spec of the state's own shape, written with `._replace` as the program
writes it (`jax.tree.map(lambda _: P(), state)._replace(rng=P("batch"))`), for in_specs and
out_specs alike; `params` is a dict (a tree: P() on each of its leaves). `rng` keeps pmap's
stacked layout, squeezed on entry and expanded in the `._replace` the body returns."""
# pmap-migrate-test: original needs legacy jax
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


class TrainState(NamedTuple):
    step: Any
    params: Any
    rng: Any


def train_step(state, batch):
    state = state._replace(rng=jax.tree.map(lambda y: jnp.squeeze(y, 0), state.rng))
    rng, dropout = jax.random.split(state.rng)
    keep = jax.random.bernoulli(dropout, 0.9, batch.shape)

    def loss(params):
        h = jnp.where(keep, batch, 0.0) @ params["w"] + params["b"]
        return jnp.mean(h ** 2)

    grads = jax.lax.pmean(jax.grad(loss)(state.params), "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, state.params, grads)
    return state._replace(
        step=state.step + 1, params=params, rng=jax.tree.map(lambda y: jnp.expand_dims(y, 0), rng)
    )


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()

    @jax.jit
    def p_train_step(state, batch):
        state_spec = jax.tree.map(lambda _: P(), state)._replace(rng=P("batch"))
        return jax.shard_map(
            train_step,
            mesh=_mesh("batch"),
            in_specs=(state_spec, P("batch")),
            out_specs=state_spec,
            check_vma=False,
        )(state, batch)
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    state = jax.device_put(TrainState(0, params, jax.random.PRNGKey(0)), NamedSharding(mesh, P()))
    state = state._replace(rng=jax.random.split(jax.random.PRNGKey(1), n))
    data = np.random.RandomState(0)
    for _ in range(3):
        state = p_train_step(state, data.normal(size=(n * 4, 3)).astype(np.float32))
    return {"w": np.asarray(state.params["w"]), "b": np.asarray(state.params["b"]),
            "step": np.asarray(state.step), "rng": np.asarray(state.rng)}
