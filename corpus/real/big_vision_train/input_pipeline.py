"""Modelled on big_vision/input_pipeline.py (@ 50622cb37bc4): each host batch is split to
(local_device_count, per_device, ...) and put on the devices with `jax.device_put_sharded`
(flax's pmap device order), then run ahead by a flax-style `prefetch_iterator`. The tf.data
source is replaced by a seeded numpy generator. Written anew."""
import collections
import functools
import itertools

import jax
import numpy as np

NUM_CLASSES = 6
FEATURES = 12


def _pmap_device_order():
    return jax.local_devices()


def prefetch_iterator(it, n):
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


def shard_and_put(x, shard=True, put=True):
    x = np.asarray(x)
    if shard:
        d = jax.local_device_count()
        x = x.reshape((d, x.shape[0] // d) + x.shape[1:])
    if shard and put:
        x = jax.device_put_sharded(list(x), _pmap_device_order())
    return x


def start_input_pipeline(data, n_prefetch=1, shard=True):
    fn = functools.partial(shard_and_put, shard=shard, put=n_prefetch)
    it = (jax.tree_util.tree_map(fn, elem) for elem in iter(data))
    return prefetch_iterator(it, n_prefetch)


def synthetic_data(seed, batch_size, num_batches=None, with_mask=False):
    """Gaussian blobs around fixed class centres, one-hot labels (and an all-ones mask)."""
    centres = np.random.RandomState(11).normal(scale=1.5, size=(NUM_CLASSES, FEATURES))
    rng = np.random.RandomState(seed)
    produced = 0
    while num_batches is None or produced < num_batches:
        labels = rng.randint(0, NUM_CLASSES, size=batch_size)
        image = centres[labels] + rng.normal(size=(batch_size, FEATURES))
        batch = {"image": image.astype(np.float32),
                 "labels": np.eye(NUM_CLASSES, dtype=np.float32)[labels]}
        if with_mask:
            batch["_mask"] = np.ones((batch_size,), np.float32)
        yield batch
        produced += 1
