"""A function that maps a factory's closure in place (`learn = make_learner(lr)`, then
`learn = jax.pmap(learn, ...)`) and returns that pmap in a tuple (Mava's `learner_setup`),
whose caller unpacks it into a name it only calls: the pmap is followed to those calls and
goes global, as a factory's returned pmap does."""
import jax
import jax.numpy as jnp
import numpy as np


def make_learner(lr):
    def learn(w, x):
        return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), "device")

    return learn


def setup(lr):
    learn = make_learner(lr)
    learn = jax.pmap(learn, axis_name="device")
    return learn, 3


def run():
    n = jax.local_device_count()
    learn, steps = setup(0.1)
    w = jnp.stack([jnp.ones((3,))] * n)
    x = np.ones((n, 4, 3), np.float32)
    for _ in range(steps):
        w = learn(w, x)
    return np.asarray(w[0])
