"""pmap of a functools.partial callee: hyperparameters (lr, momentum) are bound by
partial and the remaining arguments are mapped; the body uses pmean over "batch".
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


def loss_fn(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


def step(w, velocity, x, y, lr, momentum):
    grad = jax.grad(loss_fn)(w, x, y)
    grad = jax.lax.pmean(grad, axis_name="batch")
    velocity = momentum * velocity + grad
    w = w - lr * velocity
    return w, velocity, jax.lax.pmean(loss_fn(w, x, y), axis_name="batch")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(3)
    x = rng.normal(size=(n, 5, 2)).astype(np.float32)
    y = (x @ np.array([0.7, -1.3], np.float32)).astype(np.float32)

    p_step = jax.pmap(functools.partial(step, lr=0.1, momentum=0.9), axis_name="batch")
    # A second partial site with different hyperparameters (plain SGD).
    p_sgd = jax.pmap(functools.partial(step, lr=0.05, momentum=0.0), axis_name="batch")

    w = jnp.zeros((n, 2), jnp.float32)
    velocity = jnp.zeros((n, 2), jnp.float32)
    losses = []
    for _ in range(4):
        w, velocity, loss = p_step(w, velocity, x, y)
        losses.append(float(loss[0]))

    w_sgd, _, loss_sgd = p_sgd(jnp.zeros((n, 2)), jnp.zeros((n, 2)), x, y)

    return {
        "w": np.asarray(w),
        "velocity": np.asarray(velocity),
        "losses": np.asarray(losses),
        "w_sgd": np.asarray(w_sgd),
        "loss_sgd": np.asarray(loss_sgd),
    }
