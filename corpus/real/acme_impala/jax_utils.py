"""Modelled on acme/jax/utils.py (google-deepmind/acme @ 8d4cc040db23): the device
helpers a pmapped learner relies on. `PutToDevicesIterable` pulls one item per device from
the host iterator and places them with `jax.device_put_sharded`; `replicate_in_all_devices`
is `jax.device_put_sharded([nest] * len(devices), devices)`; `get_from_first_device`
takes `x[0]` of every leaf and `jax.device_get`s it unless `as_numpy=False`; `mapreduce`
vmaps a per-example function and reduces with a mean. Written anew."""
import itertools

import jax
import jax.numpy as jnp


class PutToDevicesIterable:
    """Per device, samples an item from the iterator and places it on that device."""

    def __init__(self, iterable, pmapped_user, devices):
        self.num_devices = len(devices)
        if self.num_devices == 0:
            raise ValueError("At least one device must be specified.")
        if not pmapped_user and self.num_devices != 1:
            raise ValueError("User is not implemented with pmapping but len(devices) "
                             f"= {len(devices)} is not equal to 1!")
        self.iterable = iterable
        self.pmapped_user = pmapped_user
        self.devices = devices
        self.iterator = iter(self.iterable)

    def __iter__(self):
        self.iterator = iter(self.iterable)
        return self

    def __next__(self):
        if not self.pmapped_user:
            return jax.device_put(next(self.iterator), self.devices[0])
        items = tuple(itertools.islice(self.iterator, self.num_devices))
        if len(items) < self.num_devices:
            raise StopIteration
        return jax.device_put_sharded(items, self.devices)


def device_put(iterable, device):
    return PutToDevicesIterable(iterable=iterable, pmapped_user=False, devices=[device])


def multi_device_put(iterable, devices):
    return PutToDevicesIterable(iterable=iterable, pmapped_user=True, devices=devices)


def replicate_in_all_devices(nest, devices=None):
    """Replicate array nest in all available devices."""
    devices = devices or jax.local_devices()
    return jax.device_put_sharded([nest] * len(devices), devices)


def get_from_first_device(nest, as_numpy=True):
    zeroth_nest = jax.tree_util.tree_map(lambda x: x[0], nest)
    return jax.device_get(zeroth_nest) if as_numpy else zeroth_nest


def mapreduce(f, reduce_fn=None, **vmap_kwargs):
    """`f` over examples becomes (reduce_fn o vmap o f) over a batch."""
    if reduce_fn is None:
        reduce_fn = lambda x: jnp.mean(x, axis=0)
    vmapped_f = jax.vmap(f, **vmap_kwargs)

    def g(*args, **kwargs):
        return jax.tree_util.tree_map(reduce_fn, vmapped_f(*args, **kwargs))

    return g
