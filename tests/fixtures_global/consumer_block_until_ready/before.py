"""A plain training loop as one writes it first: four layers, pmean of grads, params
donated, and `jax.block_until_ready((params, loss))` each step. block_until_ready gives back
the tree it is given, so the tree keeps its layout (IDENTITIES in values.py)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


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


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
    return params, jax.lax.pmean(loss, "batch")


def batches(n, steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = rng.normal(size=(n * 16, 8)).astype(np.float32)
        y = rng.normal(size=(n * 16, 1)).astype(np.float32)
        yield x.reshape(n, 16, 8), y.reshape(n, 16, 1)


def run():
    n = jax.local_device_count()
    params = init(jax.random.PRNGKey(0), [8, 16, 16, 16, 1])
    params = jax.device_put_replicated(params, jax.local_devices())
    losses = []
    for x, y in batches(n, 5):
        params, loss = train_step(params, x, y)
        jax.block_until_ready((params, loss))
        losses.append(float(loss[0]))
    final = jax.tree_util.tree_map(lambda p: p[0], params)
    return {"losses": np.asarray(losses), "w0": np.asarray(final[0][0])}
