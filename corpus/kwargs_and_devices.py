"""Call-site and placement options: a pmapped function called with a keyword argument
(kwargs are mapped over axis 0), `devices=jax.local_devices()`, `backend="cpu"`, and
`axis_size=` equal to the local device count.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def masked_mean(x, mask=None):
    if mask is None:
        mask = jnp.ones_like(x)
    num = jax.lax.psum(jnp.sum(x * mask), "i")
    den = jax.lax.psum(jnp.sum(mask), "i")
    return num / den


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    mask = (x % 3 != 0).astype(np.float32)

    plain = masked_mean(x)
    masked = masked_mean(x, mask=mask)  # keyword argument, mapped on axis 0

    devices = jax.local_devices()
    p_rms_devices = jax.pmap(rms, axis_name="i", devices=devices)
    p_rms_backend = jax.pmap(rms, axis_name="i", backend="cpu")
    p_rms_sized = jax.pmap(rms, axis_name="i", axis_size=n)

    on_devices = p_rms_devices(x)
    on_backend = p_rms_backend(x)
    sized = p_rms_sized(x)
    # devices= with an explicit sub-list also fixes the axis size.
    k = max(1, n // 2)
    half = jax.pmap(rms, axis_name="i", devices=devices[:k])(x[:k])

    return {
        "plain_mean": np.asarray(plain),
        "masked_mean": np.asarray(masked),
        "rms_devices": np.asarray(on_devices),
        "rms_backend": np.asarray(on_backend),
        "rms_axis_size": np.asarray(sized),
        "rms_half_devices": np.asarray(half),
    }
