"""PM609: the pmap is bound to a local name of a method (built on every call, not held on
self), so the tool does not follow it: kept in the faithful style."""
import jax
import numpy as np


class Lazy:
    def total(self, x):
        summed = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
        return summed(x)


def run():
    n = jax.local_device_count()
    return {"t": np.asarray(Lazy().total(np.ones((n, 2), np.float32)))}
