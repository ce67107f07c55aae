"""in_axes with None: broadcast an unmapped weight matrix to every device.

Also a 3-argument function whose tuple in_axes mixes 0 and None.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, in_axes=(0, None))
def dense(x, w):
    # x: per-device (batch, d_in); w: the same (d_in, d_out) on every device.
    return jnp.tanh(x @ w)


def affine(x, w, b):
    return x @ w + b


def scaled_residual(x, alpha, h):
    return x + alpha * h


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(1)
    x = rng.normal(size=(n, 2, 4)).astype(np.float32)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    b = np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 10.0

    h = dense(x, w)

    # Weight broadcast, bias mapped per device.
    p_affine = jax.pmap(affine, axis_name="batch", in_axes=(0, None, 0))
    z = p_affine(x, w, b)

    # Scalar hyper-parameter broadcast in the middle of the argument list.
    p_res = jax.pmap(scaled_residual, in_axes=(0, None, 0))
    r = p_res(z, jnp.float32(0.5), jnp.ones_like(z))

    return {
        "dense": np.asarray(h),
        "affine": np.asarray(z),
        "residual": np.asarray(r),
    }
