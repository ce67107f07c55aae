"""pmap's stacked rows stay rows through `x.at[i].set(v)`, so a value built that way keeps its
device axis (PM611) and the site goes global; `steps * jnp.ones(n)` (a local number times a
replicated stack) is replicated. The mapped function starts with a decorated def, and the
statement that squeezes the device axis goes above its decorator. (After the Lorenz ODE
example of JAX's cloud_tpu_colabs.)"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def integrate(path, dt, length):
    @jax.jit
    def one_step(i, path):
        return path.at[i].set(path[i - 1] * 0.9 + dt)

    return lax.fori_loop(1, length, one_step, path)


def run():
    n = jax.local_device_count()
    steps = 6
    paths = jnp.zeros((n, steps, 2))
    paths = paths.at[:, 0].set(jnp.ones((n, 2)) * 0.5)
    paths = jax.pmap(integrate)(paths, 0.1 * jnp.ones(n), steps * jnp.ones(n, dtype=np.int32))
    grid = jnp.arange(n * 2.0).reshape((n, 2)) / (4.0 * n)
    shifted = jax.pmap(lambda g: g + 1.0)
    return {"paths": np.asarray(paths), "grid": np.asarray(jax.vmap(shifted)(grid[None]))}
