"""Modelled on scenic/dataset_lib/dataset_utils.py (@ 4a38d475ee89): host batches `shard`ed
to (local_device_count, -1, ...) with numpy, then placed by a flax-style
`prefetch_to_device` (`jax.device_put_sharded` into a deque of 2); the dataset carries its
`meta_data` dict. A seeded numpy source stands in for tfds. Written anew."""
import collections
import itertools

import jax
import numpy as np

NUM_CLASSES = 4
INPUT_SHAPE = (-1, 6, 6, 1)


def shard(pytree, n_devices=None):
    n_devices = n_devices or jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((n_devices, -1) + x.shape[1:]), pytree)


def prefetch_to_device(iterator, size, devices=None):
    queue = collections.deque()
    devices = devices or jax.local_devices()

    def _prefetch(xs):
        return jax.device_put_sharded(list(xs), devices)

    def enqueue(n):
        for data in itertools.islice(iterator, n):
            queue.append(jax.tree_util.tree_map(_prefetch, data))

    enqueue(size)
    while queue:
        yield queue.popleft()
        enqueue(1)


class Dataset:
    def __init__(self, train_iter, valid_iter, meta_data):
        self.train_iter, self.valid_iter, self.meta_data = train_iter, valid_iter, meta_data


def _batches(seed, batch_size):
    templates = np.random.RandomState(5).normal(size=(NUM_CLASSES, 6, 6, 1))
    rng = np.random.RandomState(seed)
    while True:
        labels = rng.randint(0, NUM_CLASSES, size=batch_size)
        inputs = templates[labels] + 0.8 * rng.normal(size=(batch_size, 6, 6, 1))
        yield {"inputs": inputs.astype(np.float32),
               "label": np.eye(NUM_CLASSES, dtype=np.float32)[labels],
               "batch_mask": np.ones((batch_size,), np.float32)}


def get_dataset(batch_size, eval_batch_size, prefetch_buffer_size=2):
    train_iter = prefetch_to_device(map(shard, _batches(1, batch_size)), prefetch_buffer_size)
    valid_iter = prefetch_to_device(map(shard, _batches(2, eval_batch_size)),
                                    prefetch_buffer_size)
    meta_data = {"num_classes": NUM_CLASSES, "input_shape": INPUT_SHAPE,
                 "num_train_examples": 8 * batch_size, "num_eval_examples": 2 * eval_batch_size}
    return Dataset(train_iter, valid_iter, meta_data)
