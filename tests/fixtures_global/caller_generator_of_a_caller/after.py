"""The loop written as a generator that yields `(params, loss)`, driven by a function that is
no caller itself: the generator's parameters feed its step, so it is read inside the function
that calls it (callers.fold_callers), which becomes the caller."""
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


def init(rng, sizes):
    params = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(jax.random.fold_in(rng, i), (a, b)) * 0.1
        params.append((w, jnp.zeros((b,))))
    return params


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)


def _train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
    return params, jax.lax.pmean(loss, "batch")


@jax.jit
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def batches(n, steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = rng.normal(size=(n * 16, 8)).astype(np.float32)
        y = rng.normal(size=(n * 16, 1)).astype(np.float32)
        yield x.reshape(n * 16, 8), y.reshape(n * 16, 1)


def train(params, n):
    for x, y in batches(n, 5):
        params, loss = train_step(params, x, y)
        yield params, loss


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    params = init(jax.random.PRNGKey(0), [8, 16, 16, 16, 1])
    params = jax.device_put(params, NamedSharding(mesh, P()))
    losses = []
    for params, loss in train(params, n):
        losses.append(float(loss))
    final = params
    return {"losses": np.asarray(losses), "w0": np.asarray(final[0][0])}
