"""flax imagenet's 2020 `sync_batch_stats`: the function the training loop calls builds its
own pmapped mean each time (`avg = jax.pmap(...)`). It is read inside the loop that calls it,
given the loop's values, and its site goes global under the mesh of its axis "x", built where
the pmap was."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def train_step(state, batch):
    grad = jax.lax.pmean(jnp.mean(batch, axis=0), "batch")
    stats = 0.9 * state["stats"] + 0.1 * jnp.mean(batch)  # per device, not averaged
    return {"w": state["w"] - 0.1 * grad, "stats": stats}


def sync_batch_stats(state):
    """Sync the batch statistics across replicas."""
    avg = jax.pmap(lambda x: jax.lax.pmean(x, "x"), "x")
    return dict(state, stats=avg(state["stats"]))


def run(steps=4):
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    state = jax.device_put_replicated({"w": jnp.ones(3), "stats": jnp.zeros(())},
                                      jax.local_devices())
    synced = []
    for step in range(steps):
        batch = rng.normal(size=(n, 2, 3)).astype(np.float32)
        state = train_step(state, batch)
        if step % 2 == 1:
            state = sync_batch_stats(state)
            synced.append(np.asarray(state["stats"]))
    state = sync_batch_stats(state)
    return {"w": np.asarray(state["w"][0]), "stats": np.asarray(state["stats"]),
            "synced": np.stack(synced)}
