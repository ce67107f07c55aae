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
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _evaluate(params, x, y):
    return jax.lax.psum(jnp.sum((x @ params["w"] + params["b"] - y) ** 2), "batch")


@jax.jit
def evaluate(params, x, y):
    return jax.shard_map(
        _evaluate,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def _total(w, x):
    return jax.lax.psum(jnp.sum(x @ w), "batch")


@jax.jit
def total(w, x):
    return jax.shard_map(
        _total, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rows = np.linspace(-1.0, 1.0, 96, dtype=np.float32).reshape(-1, 3)
    mine = rows[jax.process_index()::jax.process_count()]
    batches = [(mine[i::2].reshape(-1, 3), mine[i::2].sum(axis=1).reshape(-1))
               for i in range(2)]
    params = jax.device_put(
        {"w": np.array([0.5, -1.0, 2.0], np.float32),
         "b": np.float32(0.1)},
        NamedSharding(mesh, P()),
    )
    errors = []
    for batch in batches:
        batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), batch)
        errors.append(evaluate(params, *batch))
        errors.append(evaluate(params, *batch) * 2.0)
    x = batches[0][0]
    w = np.array([1.0, 2.0, 3.0], np.float32)
    v = np.ones(3, np.float32)
    u = np.asarray(v)
    sums = [total(
        jax.device_put(w, NamedSharding(mesh, P())),
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    ), total(
        jax.device_put(u, NamedSharding(mesh, P())),
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    )]
    # Waited for before `v` changes: on CPU, JAX may read a numpy argument's memory
    # after the call returns (jax-ml/jax#37830), under pmap as under jit.
    jax.block_until_ready(sums)
    v[0] = 5.0
    sums += [total(
        jax.device_put(w, NamedSharding(mesh, P())),
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    ), total(
        jax.device_put(u, NamedSharding(mesh, P())),
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    ), total(
        jax.device_put(w.sum() * np.ones(3, np.float32), NamedSharding(mesh, P())),
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
    )]
    return {"errors": np.stack([np.asarray(e) for e in errors]),
            "sums": np.stack([np.asarray(s) for s in sums])}
