"""Multi-process: a step compiled ahead of time with `.lower(...).compile()` on each process's
rows (a list of two batches, starred into the calls), then called in a loop; the direct
`.lower(...).compile()(...)` form too. The compiled program takes the same global arrays as
the step: the lowering's arguments are made global as a call's are."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _evaluate(w, x, y):
    return jax.lax.psum(jnp.sum((x @ w - y) ** 2), "batch")


@jax.jit
def evaluate(w, x, y):
    return jax.shard_map(
        _evaluate,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, x, y)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rows = np.linspace(-1.0, 1.0, 96, dtype=np.float32).reshape(-1, 3)
    x = rows[jax.process_index()::jax.process_count()]
    y = x @ np.array([0.5, -1.0, 2.0], np.float32)
    batch = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P("batch")),
        [x.reshape(-1, 3), y.reshape(-1)],
    )
    w = np.array([0.4, -0.9, 2.1], np.float32)
    first = evaluate.lower(
        jax.device_put(w, NamedSharding(mesh, P())),
        *batch,
    ).compile()(jax.device_put(w, NamedSharding(mesh, P())), *batch)
    compiled = evaluate.lower(jax.device_put(w, NamedSharding(mesh, P())), *batch).compile()
    errors = []
    for scale in (1.0, 2.0):
        errors.append(compiled(jax.device_put(w * scale, NamedSharding(mesh, P())), *batch))
    return {"first": np.asarray(first), "errors": np.stack([np.asarray(e) for e in errors])}
