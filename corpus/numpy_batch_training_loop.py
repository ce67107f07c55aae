"""A tutorial-style data-parallel training loop: an MLP trained by SGD for 1000 steps, each step
fed a fresh host numpy batch split over the devices, gradients and loss averaged with lax.pmean.
Params are replicated once with np.stack; the loop never blocks until the end, like real loops.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 1000
PER_DEVICE = 8
LAYERS = (4, 16, 16, 1)
LR = 0.05


def init_params(seed=0):
    rng = np.random.RandomState(seed)
    return [
        {"w": (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32), "b": np.zeros((b,), np.float32)}
        for a, b in zip(LAYERS[:-1], LAYERS[1:])
    ]


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch")
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = jax.lax.pmean(grads, axis_name="batch")
    loss = jax.lax.pmean(loss, axis_name="batch")
    params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return params, loss


def make_dataset(size=2048, seed=1):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1.0, 1.0, size=(size, LAYERS[0])).astype(np.float32)
    y = np.sin(x @ np.array([1.0, -2.0, 0.5, 1.5], np.float32))[:, None]
    return x, y.astype(np.float32)


def batches(x, y, n):
    """Endless shuffled host batches of shape (n, PER_DEVICE, ...), reshuffled every epoch."""
    rng = np.random.RandomState(2)
    size = n * PER_DEVICE
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(x) - size + 1, size):
            index = order[start:start + size]
            yield x[index].reshape(n, PER_DEVICE, -1), y[index].reshape(n, PER_DEVICE, -1)


def run():
    n = jax.local_device_count()
    params = jax.tree_util.tree_map(lambda p: np.stack([p] * n), init_params())
    x, y = make_dataset()
    losses = []
    data = batches(x, y, n)
    for step in range(STEPS):
        xb, yb = next(data)
        params, loss = train_step(params, xb, yb)
        if step % 100 == 0:
            losses.append(loss)  # kept on device: no host sync inside the loop
    params = jax.device_get(params)
    return {
        "losses": np.stack([np.asarray(l) for l in losses]),
        "final_loss": np.asarray(loss),
        "w_out": params[-1]["w"],
        "b_hidden": params[0]["b"],
    }
