"""A function that maps a factory's closure in place (`learn = make_learner(lr)`, then
`learn = jax.pmap(learn, ...)`) and returns that pmap in a tuple (Mava's `learner_setup`),
whose caller unpacks it into a name it only calls: the pmap is followed to those calls and
goes global, as a factory's returned pmap does."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def make_learner(lr):
    def learn(w, x):
        return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), "device")

    return learn


def setup(lr):
    learn = make_learner(lr)
    learn = jax.jit(jax.shard_map(
        learn,
        mesh=_mesh("device"), in_specs=(P(), P()), out_specs=P(), check_vma=False,
    ))
    return learn, 3


def run():
    mesh = _mesh("device")
    n = jax.local_device_count()
    learn, steps = setup(0.1)
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    x = np.ones((4, 3), np.float32)
    for _ in range(steps):
        w = learn(w, x)
    return np.asarray(w)
