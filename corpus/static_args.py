"""static_broadcasted_argnums: Python int / str config args used in control flow.

Covers the int form and the tuple form, with static args at non-zero positions.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i", static_broadcasted_argnums=1)
def power_sum(x, num_terms):
    # `num_terms` is a Python int: the loop is unrolled at trace time.
    acc = jnp.zeros_like(x)
    term = jnp.ones_like(x)
    for _ in range(num_terms):
        acc = acc + term
        term = term * x
    return jax.lax.psum(acc, "i")


def activate(x, scale, kind, normalize):
    y = x * scale
    if kind == "relu":
        y = jax.nn.relu(y)
    elif kind == "tanh":
        y = jnp.tanh(y)
    if normalize:
        y = y / (jax.lax.pmax(jnp.max(jnp.abs(y)), "j") + 1e-6)
    return y


p_activate = jax.pmap(activate, axis_name="j", static_broadcasted_argnums=(2, 3))


def run():
    n = jax.local_device_count()
    x = np.linspace(-1.0, 1.0, n * 3, dtype=np.float32).reshape(n, 3)
    scale = np.full((n,), 2.0, np.float32)[:, None]

    out = {
        "power_sum_2": power_sum(x, 2),
        "power_sum_4": power_sum(x, 4),
        "relu": p_activate(x, scale, "relu", False),
        "tanh_norm": p_activate(x, scale, "tanh", True),
        "identity_norm": p_activate(x, scale, "none", True),
    }
    return {k: np.asarray(v) for k, v in out.items()}
