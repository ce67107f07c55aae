# pmap-migrate-test: original needs legacy jax
"""A script's own `shard`, called by both its train and its eval loader (the Hugging Face
Flax notebooks' shape): one rewrite serves both, since every use of it is a call the
training function's analysis follows with the same per-device batches."""
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


def shard(xs):
    return jax.tree_util.tree_map(
        lambda x: x.reshape((-1,) + x.shape[1:]), xs)


def train_loader(data, batch_size):
    for i in range(len(data) // batch_size):
        yield shard(data[i * batch_size:(i + 1) * batch_size])


def eval_loader(data, batch_size):
    for i in range(len(data) // batch_size):
        yield shard(data[i * batch_size:(i + 1) * batch_size][::-1])


def train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


def eval_step(w, x):
    return jax.lax.pmean(jnp.mean(x @ w), "batch")


@jax.jit
def p_train_step(w, x):
    return jax.shard_map(
        train_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, x)


@jax.jit
def p_eval_step(w, x):
    return jax.shard_map(
        eval_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    data = np.arange(n * 4 * 3 * 3, dtype=np.float32).reshape(-1, 3) / 100.0
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    for x in train_loader(data, n * 4):
        w = p_train_step(w, x)
    scores = [float(p_eval_step(w, x)) for x in eval_loader(data, n * 4)]
    return {"w": np.asarray(w), "scores": np.asarray(scores)}
