"""Every import comes after the first def (which reads them only when called): what the
migration writes above them, or reads at import, must not rely on them."""
N = 3


def run():
    n = jax.local_device_count()
    x = np.ones((n * 2, N), np.float32).reshape(n, -1, N)
    return gstep(x)[0]


import functools

import jax
import numpy as np
from jax.sharding import Mesh


@functools.partial(jax.pmap, axis_name="b")
def gstep(v):
    return jax.lax.psum(v, "b")


if __name__ == "__main__":
    result = run()
