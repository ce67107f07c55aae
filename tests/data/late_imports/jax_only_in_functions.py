"""jax is imported only inside the functions: the module-level code the migration writes
(mesh and contract functions) needs a module-level import."""
import functools

import numpy as np


def run():
    import jax

    n = jax.local_device_count()
    x = np.ones((n * 2, 3), np.float32).reshape(n, -1, 3)
    return gstep(x)[0]


def gstep(v):
    import jax

    return jax.pmap(lambda u: jax.lax.psum(u, "b"), axis_name="b")(v)


result = run()
