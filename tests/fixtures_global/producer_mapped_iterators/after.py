"""flax imagenet's input path without flax: a module function mapped over a dataset
(`map(prepare_tf_data, ds)`, built in `create_input_iter`, called with keywords), read in
`for step, batch in zip(range(k), it)`, `enumerate(it)` and `next(it)`."""
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


def prepare_tf_data(xs):
    local_device_count = jax.local_device_count()

    def _prepare(x):
        x = np.asarray(x)
        return x.reshape((-1,) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def dataset(seed, batch_size):
    rng = np.random.RandomState(seed)
    while True:
        yield {"image": rng.normal(size=(batch_size, 3)).astype(np.float32),
               "label": rng.normal(size=(batch_size,)).astype(np.float32)}


def create_input_iter(seed, *, batch_size, train=True):
    ds = dataset(seed if train else seed + 100, batch_size)
    return map(prepare_tf_data, ds)


def _train_step(w, batch):
    loss, grads = jax.value_and_grad(
        lambda p: jnp.mean((batch["image"] @ p - batch["label"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


@jax.jit
def train_step(w, batch):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, batch)


def _eval_step(w, batch):
    return jax.lax.psum(jnp.sum((batch["image"] @ w - batch["label"]) ** 2), "batch")


@jax.jit
def eval_step(w, batch):
    return jax.shard_map(
        _eval_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, batch)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    train_iter = create_input_iter(0, batch_size=4 * n)
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    losses, errors = [], []
    for step, batch in zip(range(4), train_iter):
        w, loss = train_step(w, batch)
        losses.append(np.asarray(loss))
    eval_iter = create_input_iter(1, batch_size=4 * n, train=False)
    for i, batch in enumerate(eval_iter):
        errors.append(np.asarray(eval_step(w, batch)))
        if i == 2:
            break
    errors.append(np.asarray(eval_step(w, next(eval_iter))))
    return {"w": np.asarray(w), "losses": np.asarray(losses), "errors": np.asarray(errors)}
