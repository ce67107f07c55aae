"""An input pipeline as big_vision writes it: each host batch split to (n, per_device, ...) and
put with `device_put_sharded(list(x), devices)` in a generator expression, then run ahead by a
prefetch generator that hands the iterator through with `yield from` when no prefetch is asked
and otherwise tops a deque up in a nested def. Both paths yield the per-device batches, so the
step's batches become global arrays, placed ahead of the step."""
# pmap-migrate-test: original needs legacy jax
import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np


def prefetch(it, n):
    if not n:
        yield from it
        return
    queue = collections.deque()

    def enqueue(n_steps):
        for data in itertools.islice(it, n_steps):
            queue.append(data)

    enqueue(n)
    while queue:
        yield queue.popleft()
        enqueue(1)


def split_and_put(x):
    d = jax.local_device_count()
    x = np.asarray(x).reshape((d, -1) + x.shape[1:])
    return jax.device_put_sharded(list(x), jax.local_devices())


def start(data, n_prefetch):
    it = (jax.tree_util.tree_map(split_and_put, elem) for elem in data)
    return prefetch(it, n_prefetch)


def synthetic(seed, batch_size):
    rng = np.random.RandomState(seed)
    while True:
        image = rng.normal(size=(batch_size, 5)).astype(np.float32)
        yield {"image": image, "label": (image.sum(axis=1) > 0).astype(np.float32)}


def loss(w, batch):
    return jnp.mean((batch["image"] @ w - batch["label"]) ** 2)


def update(w, batch):
    value, grad = jax.value_and_grad(loss)(w, batch)
    grad, value = jax.lax.pmean((grad, value), "batch")
    return w - 0.1 * grad, value


p_update = jax.pmap(update, axis_name="batch")


def run():
    w = jax.device_put_replicated(jnp.zeros(5), jax.local_devices())
    losses = []
    for _, batch in zip(range(4), start(synthetic(3, 4 * jax.local_device_count()), 1)):
        w, value = p_update(w, batch)
        losses.append(float(value[0]))
    return {"w": np.asarray(w[0]), "losses": np.asarray(losses)}
