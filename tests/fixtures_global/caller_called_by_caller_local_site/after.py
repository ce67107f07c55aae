"""flax imagenet's 2020 `sync_batch_stats`: the function the training loop calls builds its
own pmapped mean each time (`avg = jax.pmap(...)`). It is read inside the loop that calls it,
given the loop's values, and its site goes global under the mesh of its axis "x", built where
the pmap was."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from _pmap_helpers import _device_put_replicated


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(state, batch):
    state = jax.tree.map(lambda y: jnp.squeeze(y, 0), state)
    grad = jax.lax.pmean(jnp.mean(batch, axis=0), "batch")
    stats = 0.9 * state["stats"] + 0.1 * jnp.mean(batch)  # per device, not averaged
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0), {"w": state["w"] - 0.1 * grad, "stats": stats}
    )


@jax.jit
def train_step(state, batch):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(state, batch)


@jax.jit
def avg(x):
    return jax.shard_map(
        jax.vmap(lambda x: jax.lax.pmean(x, "x")),
        mesh=_mesh("x"),
        in_specs=(P("x"),),
        out_specs=P("x"),
        check_vma=False,
    )(x)


def sync_batch_stats(state):
    """Sync the batch statistics across replicas."""
    return dict(state, stats=avg(state["stats"]))


def run(steps=4):
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    state = _device_put_replicated({"w": jnp.ones(3), "stats": jnp.zeros(())},
                                      jax.local_devices())
    synced = []
    for step in range(steps):
        batch = rng.normal(size=(n * 2, 3)).astype(np.float32)
        state = train_step(state, batch)
        if step % 2 == 1:
            state = sync_batch_stats(state)
            synced.append(np.asarray(state["stats"]))
    state = sync_batch_stats(state)
    return {"w": np.asarray(state["w"][0]), "stats": np.asarray(state["stats"]),
            "synced": np.stack(synced)}
