"""Pytree in_axes/out_axes prefixes: dict and nested-tuple arguments with
in_axes=({"w": 0, "b": None}, 0), dict/tuple out_axes, and in_axes=1 / out_axes=1 leaves.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i", in_axes=({"w": 0, "b": None}, 0))
def linear(params, x):
    # Per-device weights, one shared bias broadcast to all devices.
    return x @ params["w"] + params["b"]


def summarize(pair, scale):
    (a, b), c = pair
    total = jax.lax.psum(jnp.sum(a) + jnp.sum(b), "i")
    return {"scaled": (a + b + c) * scale, "total": total}


@functools.partial(jax.pmap, in_axes=1, out_axes=1)
def column_softmax(x):
    # x is mapped along axis 1: each device sees one column of shape (rows,).
    return jax.nn.softmax(x)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(2)
    params = {
        "w": rng.normal(size=(n, 3, 2)).astype(np.float32),
        "b": np.array([0.5, -0.5], np.float32),
    }
    x = rng.normal(size=(n, 4, 3)).astype(np.float32)
    y = linear(params, x)

    a = np.ones((n, 2), np.float32)
    b = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    c = np.float32(10.0)
    p_summarize = jax.pmap(
        summarize,
        axis_name="i",
        in_axes=(((0, 0), None), None),
        out_axes={"scaled": 0, "total": None},
    )
    summary = p_summarize(((a, b), c), 0.5)

    p_split = jax.pmap(lambda v: (v * 2, jnp.sum(v)), out_axes=(1, 0))
    doubled_t, sums = p_split(b)

    cols = column_softmax(rng.normal(size=(4, n)).astype(np.float32))
    return {
        "linear": np.asarray(y),
        "scaled": np.asarray(summary["scaled"]),
        "total": np.asarray(summary["total"]),
        "doubled_t": np.asarray(doubled_t),
        "sums": np.asarray(sums),
        "column_softmax": np.asarray(cols),
    }
