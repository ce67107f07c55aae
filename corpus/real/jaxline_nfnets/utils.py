"""Modelled on jaxline/utils.py (google-deepmind/jaxline @ a2308d62191d): `get_first`
(`x[0]` of every leaf), `bcast_local_devices` (`jax.device_put_sharded` of n copies onto the
local devices), the host-id / per-device rng specialisation (`fold_in` of the host id and
of `lax.axis_index`, called inside the caller's pmap), `rendezvous()` (a pmap of a psum,
read back with `device_get` and `x[0]`), and a `py_prefetch`-style iterator. Written
anew."""
import collections
import itertools

import jax
import jax.numpy as jnp


def get_first(xs):
    """Gets values from the first device."""
    return jax.tree_util.tree_map(lambda x: x[0], xs)


def bcast_local_devices(value):
    """Broadcasts an object to all local devices."""
    devices = jax.local_devices()
    return jax.tree_util.tree_map(
        lambda v: jax.device_put_sharded(len(devices) * [v], devices), value)


RANDOM_MODES = {
    "unique_host_unique_device": (True, True),
    "unique_host_same_device": (True, False),
    "same_host_unique_device": (False, True),
    "same_host_same_device": (False, False),
}


def host_id_devices_for_rng(mode="unique_host_unique_device"):
    if not RANDOM_MODES[mode][0]:
        return None
    return jnp.broadcast_to(jax.process_index(), (jax.local_device_count(),))


def specialize_rng_host_device(rng, host_id, axis_name, mode="unique_host_unique_device"):
    """Specializes a rng to the host/device we are on (call inside a pmap)."""
    unique_host, unique_device = RANDOM_MODES[mode]
    if unique_host:
        if host_id is None:
            raise ValueError(f"host_id must be given in RNG mode: {mode}")
        rng = jax.random.fold_in(rng, host_id)
    if unique_device:
        rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
    return rng


def rendezvous():
    """Forces all hosts to check in."""
    x = jnp.ones([jax.local_device_count()])
    x = jax.device_get(jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(x))
    if x[0] != jax.device_count():
        raise ValueError(f"Expected {jax.device_count()} got {x}")


def py_prefetch(iterable_function, buffer_size=2):
    """Runs the iterator ahead by `buffer_size` items (in-thread here)."""
    it = iter(iterable_function())
    queue = collections.deque(itertools.islice(it, buffer_size))
    while queue:
        yield queue.popleft()
        queue.extend(itertools.islice(it, 1))
