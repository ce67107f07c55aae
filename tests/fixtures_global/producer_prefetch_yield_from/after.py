"""An input pipeline as big_vision writes it: each host batch split to (n, per_device, ...) and
put with `device_put_sharded(list(x), devices)` in a generator expression, then run ahead by a
prefetch generator that hands the iterator through with `yield from` when no prefetch is asked
and otherwise tops a deque up in a nested def. Both paths yield the per-device batches, so the
step's batches become global arrays, placed ahead of the step."""
# pmap-migrate-test: original needs legacy jax
import functools
import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


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
    x = np.asarray(x).reshape((-1,) + x.shape[1:])
    return jax.device_put(x, NamedSharding(_mesh("batch"), P("batch")))


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


@jax.jit
def p_update(w, batch):
    return jax.shard_map(
        update,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=(P(), P()),
        check_vma=False,
    )(w, batch)


def run():
    mesh = _mesh("batch")
    w = jax.device_put(jnp.zeros(5), NamedSharding(mesh, P()))
    losses = []
    for _, batch in zip(range(4), start(synthetic(3, 4 * jax.local_device_count()), 1)):
        w, value = p_update(w, batch)
        losses.append(float(value))
    return {"w": np.asarray(w), "losses": np.asarray(losses)}
