"""A multi-process training loop in flax imagenet's shape: batches reshaped per device on each
host and prefetched with flax's prefetch_to_device, a replicated struct state whose batch
statistics differ per device, and a module-level pmapped mean that syncs them, called from a
helper of the training loop. Every site goes global: the state keeps pmap's stacked layout
(its statistics differ per device), each prefetched batch is the process's own rows made one
global array at the step's call, and the mean runs under the mesh of its axis "x" inside
the helper. Run with flax itself on each side (tests/flax_sides.py), at one and two
processes."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils, struct
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from _pmap_helpers import _device_put_replicated


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


@struct.dataclass
class State:
    w: jax.Array
    batch_stats: jax.Array


def train_step(state, batch):
    state = jax.tree.map(lambda y: jnp.squeeze(y, 0), state)
    grad = lax.pmean(jnp.mean(batch["x"], axis=0), "batch")
    stats = 0.9 * state.batch_stats + 0.1 * jnp.mean(batch["x"])  # per device
    new_state = state.replace(w=state.w - 0.1 * grad, batch_stats=stats)
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0),
        (new_state, lax.pmean(jnp.sum(batch["x"] @ state.w), "batch")),
    )


def eval_step(state, batch):
    state = jax.tree.map(lambda y: jnp.squeeze(y, 0), state)
    return lax.pmean(jnp.sum(batch["x"] @ state.w) + state.batch_stats, "batch")


@jax.jit
def cross_replica_mean(x):
    return jax.shard_map(
        jax.vmap(lambda x: lax.pmean(x, "x")),
        mesh=_mesh("x"),
        in_specs=(P("x"),),
        out_specs=P("x"),
        check_vma=False,
    )(x)


def sync_batch_stats(state):
    return state.replace(batch_stats=multihost_utils.global_array_to_host_local_array(
        cross_replica_mean(
            multihost_utils.host_local_array_to_global_array(
                state.batch_stats, _mesh("x"), P("x")
            ),
        ),
        _mesh("x"),
        P("x"),
    ))


def prepare(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((-1,) + x.shape[1:]), xs)


def create_input_iter(seed):
    rng = np.random.RandomState(seed + jax.process_index())
    ds = ({"x": rng.normal(size=(jax.local_device_count() * 2, 3)).astype(np.float32)}
          for _ in range(100))
    it = map(prepare, ds)
    # TODO(pmap-migrate): PM402 prefetch_to_device calls the removed device_put_sharded
    it = jax_utils.prefetch_to_device(it, 2)
    return it


@jax.jit
def p_train_step(state, batch):
    return jax.shard_map(
        train_step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(state, batch)


@jax.jit
def p_eval_step(state, batch):
    return jax.shard_map(
        eval_step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(state, batch)


def run(num_steps=6):
    mesh = _mesh("batch")
    train_iter = create_input_iter(0)
    eval_iter = create_input_iter(100)
    state = State(w=jnp.ones(3), batch_stats=jnp.zeros(()))
    state = _device_put_replicated(state, jax.local_devices())
    losses, evals = [], []
    for step, batch in zip(range(num_steps), train_iter):
        state, loss = multihost_utils.global_array_to_host_local_array(
            p_train_step(
                multihost_utils.host_local_array_to_global_array(state, mesh, P("batch")),
                jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), batch),
            ),
            mesh,
            P("batch"),
        )
        losses.append(np.asarray(loss))
        if (step + 1) % 3 == 0:
            state = sync_batch_stats(state)
            evals.append(np.asarray(p_eval_step(
                multihost_utils.host_local_array_to_global_array(state, mesh, P("batch")),
                jax.make_array_from_process_local_data(
                    NamedSharding(mesh, P("batch")),
                    next(eval_iter),
                ),
            )))
    state = sync_batch_stats(state)
    final = jax_utils.unreplicate(state)
    return {"w": np.asarray(final.w), "stats": np.asarray(final.batch_stats),
            "losses": np.stack(losses), "evals": np.stack(evals)}
