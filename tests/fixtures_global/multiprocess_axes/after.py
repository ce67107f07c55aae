"""Multi-process, two axis names: a training step on "batch" and an evaluation on "eval". Both
meshes are over all global devices in the same order, so each process's rows become one global
array on the mesh of the site that takes them."""
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


def _train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


@jax.jit
def train_step(w, x):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, x)


def _evaluate(w, x):
    return jax.lax.psum(jnp.sum(x @ w), "eval")


@jax.jit
def evaluate(w, x):
    return jax.shard_map(
        _evaluate, mesh=_mesh("eval"), in_specs=(P(), P("eval")), out_specs=P(), check_vma=False
    )(w, x)


def run():
    mesh = _mesh("batch")
    mesh_eval = _mesh("eval")
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    w = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
    for _ in range(2):
        x = rng.normal(size=(n * 4, 3)).astype(np.float32)
        w = train_step(
            w,
            jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
        )
    score = evaluate(
        w, jax.make_array_from_process_local_data(NamedSharding(mesh_eval, P("eval")), x)
    )
    return {"w": np.asarray(w), "score": np.asarray(score)}
