"""dm-haiku's imagenet example's shapes: the dataset is asked for
`batch_dims=[jax.local_device_count(), per_device_batch]` and reshapes each batch to
`tuple(batch_dims) + (features,)`, so the batches keep pmap's stacked layout (the device count
leads their shape); a NamedTuple state whose fields are read back; scalars logged with
`np.mean(v).item()` of pmean'd values."""
# pmap-migrate-test: original needs legacy jax
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

FEATURES = 3


class TrainState(NamedTuple):
    w: Any
    count: Any


@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
def train_step(train_state, batch):
    loss, grads = jax.value_and_grad(
        lambda w: jnp.mean((batch["images"] @ w - batch["labels"]) ** 2))(train_state.w)
    grads = jax.lax.pmean(grads, axis_name="i")
    scalars = jax.lax.pmean({"loss": loss, "norm": jnp.sum(grads ** 2)}, axis_name="i")
    return TrainState(train_state.w - 0.1 * grads, train_state.count + 1), scalars


def load_dataset(seed, batch_dims):
    rng = np.random.RandomState(seed)
    while True:
        size = int(np.prod(batch_dims))
        images = rng.normal(size=(size, FEATURES)).astype(np.float32)
        labels = images @ np.array([0.5, -1.0, 2.0], np.float32)
        yield {"images": images.reshape(tuple(batch_dims) + (FEATURES,)),
               "labels": labels.reshape(tuple(batch_dims))}


def run():
    local_device_count = jax.local_device_count()
    train_dataset = load_dataset(5, [local_device_count, 4])
    train_state = jax.device_put_replicated(TrainState(jnp.zeros((FEATURES,)), jnp.zeros(())),
                                            jax.local_devices())
    logged = []
    for _ in range(3):
        batch = next(train_dataset)
        train_state, train_scalars = train_step(train_state, batch)
        logs = jax.tree.map(lambda v: np.mean(v).item(), jax.device_get(train_scalars))
        logged.append(logs["loss"])
    host_w = jax.device_get(jax.tree.map(lambda x: x[0], train_state.w))
    return {"logged": np.asarray(logged), "w": np.asarray(host_w),
            "count": np.asarray(train_state.count[0])}
