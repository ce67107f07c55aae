"""A function that calls a step and is called by the training loop (flax imagenet's
`sync_batch_stats`): alone its `state` would be unknown, so it is read inside the loop that
calls it, given the loop's values. Batch statistics differ per device (the train step does not
average them), so the state keeps pmap's stacked layout, and the pmapped mean of a lambda keeps
it too: its result is the same on every device, with the device axis pmap gave it."""
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


# pmean only works inside pmap because it needs an axis name.
cross_replica_mean = jax.pmap(lambda x: jax.lax.pmean(x, "x"), "x")


def sync_batch_stats(state):
    """Sync the batch statistics across replicas."""
    return dict(state, stats=cross_replica_mean(state["stats"]))


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
