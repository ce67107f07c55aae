"""PM611 with a lambda: per-device keys, and a step's per-device results, keep pmap's stacked
layout, and the lambda runs as `jax.vmap(lambda ...)` over each device's (1, ...) block (a
replicated argument gets in_axes None). A lambda over stacked rows whose result is the same
on every device (a psum) keeps the device axis vmap gives it, as pmap's result had it; the
sites without an axis name run under the mesh of its axis "d"."""
import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    mats = jax.pmap(lambda key: jax.random.normal(key, (4, 3)))(keys)
    scale = jnp.stack([jnp.float32(0.5)] * n)
    scaled = jax.pmap(lambda m, s: m.T @ m * s)(mats, scale)
    total = jax.pmap(lambda k: jax.lax.psum(jax.random.uniform(k), "d"), axis_name="d")(keys)
    return {"mats": np.asarray(mats), "scaled": np.asarray(scaled), "total": np.asarray(total)}
