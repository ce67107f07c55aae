"""flax's `shard` written out in a program: a tree_map of a lambda reshaping each leaf to
(local_device_count, -1, ...), and the TF-era form with a nested def that converts the leaf
first (flax's imagenet `prepare_tf_data`, pixelcnn's `load_and_shard_tf_batch`)."""
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


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((-1,) + x.shape[1:]), xs)


def prepare_data(xs):
    local_device_count = jax.local_device_count()

    def _prepare(x):
        # A host copy first, as `x._numpy()` does for a TF tensor.
        x = np.asarray(x)
        return x.reshape((-1,) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def loss_step(w, batch):
    error = batch["image"] @ w - batch["label"]
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0), (jax.lax.pmean(jnp.mean(error ** 2), "batch"), error)
    )


def eval_step(w, batch):
    return jax.lax.psum(jnp.sum(batch["image"] @ w), "batch")


@jax.jit
def p_loss_step(w, batch):
    return jax.shard_map(
        loss_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(w, batch)


@jax.jit
def p_eval_step(w, batch):
    return jax.shard_map(
        eval_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, batch)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(1)
    w = jax.device_put(jnp.linspace(-1.0, 1.0, 3), NamedSharding(mesh, P()))
    losses, errors, sums = [], [], []
    for _ in range(2):
        batch = {"image": rng.normal(size=(n * 4, 3)).astype(np.float32),
                 "label": rng.normal(size=(n * 4,)).astype(np.float32)}
        loss, error = p_loss_step(w, shard(batch))
        losses.append(np.asarray(loss[0]))
        errors.append(np.asarray(error))
        sums.append(np.asarray(p_eval_step(w, prepare_data(batch))))
    return {"losses": np.asarray(losses), "errors": np.asarray(errors), "sums": np.asarray(sums)}
