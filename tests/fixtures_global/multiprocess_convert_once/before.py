"""Multi-process: host values made global once, where they are bound, when only the steps read
them. `params` (host arrays, the same on every process) is read by two steps per batch: it is
placed with P() once. Each `batch` of the loop is read by both steps: it is made global once,
first in the loop's body. Left converted at each call: `w`, which host code reads too, and `u`,
which shares memory with `v`, changed in place between its calls."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0, 0), out_axes=None)
def evaluate(params, x, y):
    return jax.lax.psum(jnp.sum((x @ params["w"] + params["b"] - y) ** 2), "batch")


@functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0), out_axes=None)
def total(w, x):
    return jax.lax.psum(jnp.sum(x @ w), "batch")


def run():
    n = jax.local_device_count()
    rows = np.linspace(-1.0, 1.0, 96, dtype=np.float32).reshape(-1, 3)
    mine = rows[jax.process_index()::jax.process_count()]
    batches = [(mine[i::2].reshape(n, -1, 3), mine[i::2].sum(axis=1).reshape(n, -1))
               for i in range(2)]
    params = {"w": np.array([0.5, -1.0, 2.0], np.float32),
              "b": np.float32(0.1)}
    errors = []
    for batch in batches:
        errors.append(evaluate(params, *batch))
        errors.append(evaluate(params, *batch) * 2.0)
    x = batches[0][0]
    w = np.array([1.0, 2.0, 3.0], np.float32)
    v = np.ones(3, np.float32)
    u = np.asarray(v)
    sums = [total(w, x), total(u, x)]
    # Waited for before `v` changes: on CPU, JAX may read a numpy argument's memory
    # after the call returns (jax-ml/jax#37830), under pmap as under jit.
    jax.block_until_ready(sums)
    v[0] = 5.0
    sums += [total(w, x), total(u, x), total(w.sum() * np.ones(3, np.float32), x)]
    return {"errors": np.stack([np.asarray(e) for e in errors]),
            "sums": np.stack([np.asarray(s) for s in sums])}
