"""PM612 with a mapped function written over several lines (jaxline's `functools.partial(`
hugging the pmap, jumanji's on lines of its own): the function keeps its shape one level
inside the adapter's call, its continuation lines moved with it. (`run` reads the
class's pmap as a value, which keeps it on the contract.)"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def scale(x, factor, axis_name):
    return jax.lax.psum(x * factor, axis_name)


class Evaluator:
    def __init__(self, factor):
        self.evaluate = jax.pmap(
            functools.partial(
                scale, factor=factor, axis_name="devices"
            ),
            axis_name="devices",
        )


def keys_for(key, apply):
    n = jax.local_device_count()
    key = jnp.broadcast_to(key, (n,) + key.shape)
    key = jax.pmap(functools.partial(
        scale, factor=2.0,
        axis_name="i"), axis_name="i")(key)
    return apply(key)


def run():
    n = jax.local_device_count()
    evaluator = Evaluator(3.0)
    evaluate = evaluator.evaluate
    x = jnp.arange(n * 2, dtype=jnp.float32).reshape(n, 2)
    return {
        "evaluate": np.asarray(evaluate(x)),
        "keys": np.asarray(keys_for(jnp.ones(2), lambda k: k + 1)),
    }
