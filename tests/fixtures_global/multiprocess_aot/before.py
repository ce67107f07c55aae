"""Multi-process: a step compiled ahead of time with `.lower(...).compile()` on each process's
rows (a list of two batches, starred into the calls), then called in a loop; the direct
`.lower(...).compile()(...)` form too. The compiled program takes the same global arrays as
the step: the lowering's arguments are made global as a call's are."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0, 0), out_axes=None)
def evaluate(w, x, y):
    return jax.lax.psum(jnp.sum((x @ w - y) ** 2), "batch")


def run():
    n = jax.local_device_count()
    rows = np.linspace(-1.0, 1.0, 96, dtype=np.float32).reshape(-1, 3)
    x = rows[jax.process_index()::jax.process_count()]
    y = x @ np.array([0.5, -1.0, 2.0], np.float32)
    batch = [x.reshape(n, -1, 3), y.reshape(n, -1)]
    w = np.array([0.4, -0.9, 2.1], np.float32)
    first = evaluate.lower(w, *batch).compile()(w, *batch)
    compiled = evaluate.lower(w, *batch).compile()
    errors = []
    for scale in (1.0, 2.0):
        errors.append(compiled(w * scale, *batch))
    return {"first": np.asarray(first), "errors": np.stack([np.asarray(e) for e in errors])}
