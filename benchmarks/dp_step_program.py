"""A realistic data-parallel training step: an MLP of LAYERS square layers, pmean of grads, SGD."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

LAYERS = 4
WIDTH = 4096
BATCH = 1024
LEARNING_RATE = 1e-3


def init_params(seed):
    rng = np.random.RandomState(seed)
    scale = 1.0 / np.sqrt(WIDTH)
    return [jnp.asarray(rng.normal(size=(WIDTH, WIDTH)).astype(np.float32) * scale)
            for _ in range(LAYERS)]


def loss_fn(params, x, y):
    h = x
    for w in params:
        h = jnp.tanh(h @ w)
    return jnp.mean((h - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, axis_name="batch")
    params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return params, jax.lax.pmean(loss, axis_name="batch")


def training(seed=0):
    """Yields after each blocked step, so that a driver can time steps one by one."""
    n = jax.local_device_count()
    params = jax.tree_util.tree_map(lambda p: jnp.stack([p] * n), init_params(seed))
    rng = np.random.RandomState(seed + 1)
    x = jnp.asarray(rng.normal(size=(n, BATCH // n, WIDTH)).astype(np.float32))
    y = jnp.asarray(rng.normal(size=(n, BATCH // n, WIDTH)).astype(np.float32))
    while True:
        params, loss = train_step(params, x, y)
        jax.block_until_ready(params)
        yield
