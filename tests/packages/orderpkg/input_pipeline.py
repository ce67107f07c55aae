"""The input pipeline: the devices in the order pmap maps over, and host batches."""
import jax
import numpy as np


def _pmap_device_order():
    return jax.local_devices()


def host_batch(step, size=16, features=3):
    return np.random.RandomState(step).normal(size=(size, features)).astype(np.float32)
