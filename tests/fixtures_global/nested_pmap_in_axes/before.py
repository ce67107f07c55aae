"""A nested pmap with in_axes / out_axes of 0 and None per level goes global: an argument the
outer level does not map is split over the inner axis only (P("model")), one the inner level
does not map over the outer axis only (P("data")), and an outer out_axes of None gives a result
without the outer axis. The mesh's sizes come from an argument each level maps. The step takes
positional arguments only (pmap maps a keyword argument on axis 0 whatever in_axes says)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="data", in_axes=(None, 0), out_axes=(None, 0))
@functools.partial(jax.pmap, axis_name="model", in_axes=(0, None))
def layer(w, x):
    y = jax.lax.psum(x @ w, "model")
    grad_w = jax.lax.pmean(jnp.outer(x, y).sum(-1, keepdims=True) * w, "data")
    return w - 0.1 * grad_w, y + jax.lax.axis_index("data")


def run():
    n = jax.local_device_count()
    data, model = n // 2, 2
    w = jnp.arange(model * 3 * 4.0).reshape((model, 3, 4)) / 10.0
    x = jnp.arange(data * 3.0).reshape((data, 3))
    new_w, y = layer(w, x)
    return {"w": np.asarray(new_w), "y": np.asarray(y)}
