"""The training loop in a function that returns the trained (replicated) state to `run`, which
calls no step itself, with a sync helper the loop calls (a module-level pmean of another axis
name). Alone the loop would hand global values to `run`, which reads them as pmap's stacks; so
it is read inside `run`, and the sync helper inside it: `run` is the caller of all three
sites, and what the loop returns reaches `tree_map(lambda a: a[0], ...)` there, which becomes the
value itself."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(state, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0) - state["w"], "batch")
    stats = jax.lax.pmean(0.9 * state["stats"] + 0.1 * jnp.mean(x), "batch")
    return {"w": state["w"] + 0.5 * grad, "stats": stats}


@jax.jit
def train_step(state, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(state, x)


@jax.jit
def cross_replica_mean(x):
    return jax.shard_map(
        lambda x: jax.lax.pmean(x, "x"),
        mesh=_mesh("x"),
        in_specs=(P(),),
        out_specs=P(),
        check_vma=False,
    )(x)


def sync_stats(state):
    return dict(state, stats=cross_replica_mean(state["stats"]))


def train(steps):
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    state = jax.device_put(
        {"w": jnp.zeros(3), "stats": jnp.zeros(())}, NamedSharding(_mesh("batch"), P())
    )
    for _ in range(steps):
        x = rng.normal(size=(n * 2, 3)).astype(np.float32)
        state = train_step(state, x.reshape(n * 2, 3))
    return sync_stats(state)


def run():
    state = jax.device_get(train(4))
    return {"w": np.asarray(state["w"]), "stats": np.asarray(state["stats"])}
