"""in_axes=1 / out_axes=1 and an out_axes dict: a host array mapped on axis 1 is split on the
same axis (P(None, axis)) and the body's first statement squeezes it, as pmap's slice has no
such axis; results with out_axes k keep pmap's layout (expanded at k, P(None, ..., axis));
{"scaled": 0, "total": None} is a spec dict."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, in_axes=1, out_axes=1)
def column_softmax(x):
    # x is mapped along axis 1: each device sees one column of shape (rows,).
    return jax.nn.softmax(x)


@functools.partial(jax.pmap, in_axes=1, static_broadcasted_argnums=1)
def scaled_columns(x, k):
    """A docstring stays first; the squeeze goes after it. k is static."""
    return x * k


def summarize(pair, scale):
    a, b = pair
    total = jax.lax.psum(jnp.sum(a) + jnp.sum(b), "i")
    return {"scaled": (a + b) * scale, "total": total}


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(2)
    cols = column_softmax(rng.normal(size=(4, n)).astype(np.float32))
    scaled = scaled_columns(np.ones((3, n), np.float32), 2)
    a = np.ones((n, 2), np.float32)
    b = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    p_summarize = jax.pmap(summarize, axis_name="i", in_axes=((0, 0), None),
                           out_axes={"scaled": 0, "total": None})
    summary = p_summarize((a, b), 0.5)
    p_split = jax.pmap(lambda v: (v * 2, jnp.sum(v)), out_axes=(1, 0))
    doubled_t, sums = p_split(b)
    return {
        "column_softmax": np.asarray(cols),
        "scaled_columns": np.asarray(scaled),
        "scaled": np.asarray(summary["scaled"]),
        "total": np.asarray(summary["total"]),
        "doubled_t": np.asarray(doubled_t),
        "sums": np.asarray(sums),
    }
