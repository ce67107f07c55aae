"""Sites of two axis names in one statement, read to the host there: each step names its own
axis's mesh, so the statement stays as it is, host reads included."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(jnp.max(x), "j")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return {
        "t": np.asarray(jax.pmap(total, axis_name="i")(x)),
        "m": float(jax.pmap(largest, axis_name="j")(x)[0]),
    }
