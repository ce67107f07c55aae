"""A multi-process training loop in flax imagenet's shape: batches reshaped per device on each
host and prefetched with flax's prefetch_to_device, a replicated struct state whose batch
statistics differ per device, and a module-level pmapped mean that syncs them, called from a
helper of the training loop. Every site goes global: the state keeps pmap's stacked layout
(its statistics differ per device), each prefetched batch is the process's own rows made one
global array at the step's call, and the mean runs under the mesh of its axis "x" inside
the helper. Run with flax itself on each side (tests/flax_sides.py), at one and two
processes."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils, struct
from jax import lax


@struct.dataclass
class State:
    w: jax.Array
    batch_stats: jax.Array


def train_step(state, batch):
    grad = lax.pmean(jnp.mean(batch["x"], axis=0), "batch")
    stats = 0.9 * state.batch_stats + 0.1 * jnp.mean(batch["x"])  # per device
    new_state = state.replace(w=state.w - 0.1 * grad, batch_stats=stats)
    return new_state, lax.pmean(jnp.sum(batch["x"] @ state.w), "batch")


def eval_step(state, batch):
    return lax.pmean(jnp.sum(batch["x"] @ state.w) + state.batch_stats, "batch")


cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")


def sync_batch_stats(state):
    return state.replace(batch_stats=cross_replica_mean(state.batch_stats))


def prepare(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs)


def create_input_iter(seed):
    rng = np.random.RandomState(seed + jax.process_index())
    ds = ({"x": rng.normal(size=(jax.local_device_count() * 2, 3)).astype(np.float32)}
          for _ in range(100))
    it = map(prepare, ds)
    it = jax_utils.prefetch_to_device(it, 2)
    return it


def run(num_steps=6):
    train_iter = create_input_iter(0)
    eval_iter = create_input_iter(100)
    state = State(w=jnp.ones(3), batch_stats=jnp.zeros(()))
    state = jax_utils.replicate(state)
    p_train_step = jax.pmap(train_step, axis_name="batch")
    p_eval_step = jax.pmap(eval_step, axis_name="batch")
    losses, evals = [], []
    for step, batch in zip(range(num_steps), train_iter):
        state, loss = p_train_step(state, batch)
        losses.append(np.asarray(loss))
        if (step + 1) % 3 == 0:
            state = sync_batch_stats(state)
            evals.append(np.asarray(p_eval_step(state, next(eval_iter))))
    state = sync_batch_stats(state)
    final = jax_utils.unreplicate(state)
    return {"w": np.asarray(final.w), "stats": np.asarray(final.batch_stats),
            "losses": np.stack(losses), "evals": np.stack(evals)}
