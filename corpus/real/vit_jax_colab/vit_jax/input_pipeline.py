"""Seeded synthetic image batches, laid out as vit_jax/input_pipeline.py lays them out:
[num_local_devices, local_batch_size, h, w, c] with one-hot labels."""
import jax
import numpy as np


def get_dataset_info(dataset, split):
  return {'num_classes': 4, 'num_examples': 64 if split == 'test' else 256}


class SyntheticImages:

  def __init__(self, *, batch_size, mode, image_size=4, seed=0):
    self.batch_size, self.mode, self.image_size = batch_size, mode, image_size
    self.seed = seed + (0 if mode == 'train' else 1)

  def as_numpy_iterator(self):
    rng = np.random.RandomState(self.seed)
    num_devices = jax.local_device_count()
    num_classes = get_dataset_info('synthetic', self.mode)['num_classes']
    while True:
      labels = rng.randint(0, num_classes, size=(self.batch_size,))
      images = rng.normal(size=(self.batch_size, self.image_size, self.image_size, 3))
      images = (images + labels[:, None, None, None] * 0.5).astype(np.float32)
      onehot = np.eye(num_classes, dtype=np.float32)[labels]
      yield {
          'image': images.reshape((num_devices, -1) + images.shape[1:]),
          'label': onehot.reshape((num_devices, -1, num_classes)),
      }


def get_data(*, batch_size, mode):
  return SyntheticImages(batch_size=batch_size, mode=mode)
