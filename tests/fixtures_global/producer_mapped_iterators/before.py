"""flax imagenet's input path without flax: a module function mapped over a dataset
(`map(prepare_tf_data, ds)`, built in `create_input_iter`, called with keywords), read in
`for step, batch in zip(range(k), it)`, `enumerate(it)` and `next(it)`."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def prepare_tf_data(xs):
    local_device_count = jax.local_device_count()

    def _prepare(x):
        x = np.asarray(x)
        return x.reshape((local_device_count, -1) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def dataset(seed, batch_size):
    rng = np.random.RandomState(seed)
    while True:
        yield {"image": rng.normal(size=(batch_size, 3)).astype(np.float32),
               "label": rng.normal(size=(batch_size,)).astype(np.float32)}


def create_input_iter(seed, *, batch_size, train=True):
    ds = dataset(seed if train else seed + 100, batch_size)
    return map(prepare_tf_data, ds)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(w, batch):
    loss, grads = jax.value_and_grad(
        lambda p: jnp.mean((batch["image"] @ p - batch["label"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


@functools.partial(jax.pmap, axis_name="batch")
def eval_step(w, batch):
    return jax.lax.psum(jnp.sum((batch["image"] @ w - batch["label"]) ** 2), "batch")


def run():
    n = jax.local_device_count()
    train_iter = create_input_iter(0, batch_size=4 * n)
    w = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices())
    losses, errors = [], []
    for step, batch in zip(range(4), train_iter):
        w, loss = train_step(w, batch)
        losses.append(np.asarray(loss[0]))
    eval_iter = create_input_iter(1, batch_size=4 * n, train=False)
    for i, batch in enumerate(eval_iter):
        errors.append(np.asarray(eval_step(w, batch)[0]))
        if i == 2:
            break
    errors.append(np.asarray(eval_step(w, next(eval_iter))[0]))
    return {"w": np.asarray(w[0]), "losses": np.asarray(losses), "errors": np.asarray(errors)}
