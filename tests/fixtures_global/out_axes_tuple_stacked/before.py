"""A step whose out_axes tuple gives back two per-device results, each fed to the next step:
both stay pmap's stacked rows (out_specs P(axis) each), taken by `join` as stacked rows."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i", out_axes=(0, 0))
def split(x):
    offset = jax.lax.axis_index("i").astype(jnp.float32)
    return jnp.sum(x) + offset, jnp.sum(x) * offset


@functools.partial(jax.pmap, axis_name="i")
def join(a, b):
    return jax.lax.psum(jnp.sum(a * b), "i")


def run():
    n = jax.local_device_count()
    x = np.ones((n, 3), np.float32)
    a, b = split(x)
    return {"total": np.asarray(join(a, b)[0])}
