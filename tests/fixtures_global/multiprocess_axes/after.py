"""Multi-process, two axis names: a training step on "batch" and an evaluation on "eval". Both
meshes are over all global devices in the same order, so each process's rows become one global
array on the mesh of the site that takes them."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P, NamedSharding


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P(), P("batch")), out_specs=P(), check_vma=False)
def train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P(), P("eval")), out_specs=P(), check_vma=False)
def evaluate(w, x):
    return jax.lax.psum(jnp.sum(x @ w), "eval")


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Auto,))
    mesh_eval = jax.make_mesh((jax.device_count(),), ("eval",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        rng = np.random.RandomState(jax.process_index())
        w = jax.device_put(jnp.ones(3), P())
        for _ in range(2):
            x = rng.normal(size=(n * 4, 3)).astype(np.float32)
            w = train_step(
                w,
                jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
            )
        with jax.set_mesh(mesh_eval):
            score = evaluate(
                w,
                jax.make_array_from_process_local_data(NamedSharding(mesh_eval, P("eval")), x),
            )
        return {"w": np.asarray(w), "score": np.asarray(score)}
