"""Modelled on the data-parallel regression of JAX's "Parallel evaluation" tutorial (jax-101).

Source: github.com/jax-ml/jax, docs/jax-101/06-parallelism.ipynb ("Parallel Evaluation in JAX",
its data-parallel example), read from a public copy of that notebook (jakevdp/jax, branch
cholesky). All code here is written anew; the tutorial's model and sizes differ.

pmap features kept:
- a notebook-style script: everything after the defs runs at module level (the tutorial's
  cells), with no function around the training loop;
- the parameters are a NamedTuple, replicated with `tree_map(lambda x: jnp.array([x] * n), ...)`;
- batches split per device by a helper def reading the module-level device count;
- `@functools.partial(jax.pmap, axis_name=...)` update with pmean of loss and grads;
- `loss[0]` printed, and the parameters read back with `device_get(tree_map(lambda x: x[0]))`.

Scaled down: 64 examples and 30 steps instead of 128 and 1000.
"""
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Params(NamedTuple):
    weight: jnp.ndarray
    bias: jnp.ndarray


def init_model(rng):
    weights_key, bias_key = jax.random.split(rng)
    weight = jax.random.normal(weights_key, ())
    bias = jax.random.normal(bias_key, ())
    return Params(weight, bias)


def squared_error(params, xs, ys):
    predictions = params.weight * xs + params.bias
    return jnp.mean((predictions - ys) ** 2)


STEP_SIZE = 0.05


@functools.partial(jax.pmap, axis_name="num_devices")
def update(params, xs, ys):
    loss, grads = jax.value_and_grad(squared_error)(params, xs, ys)
    grads = jax.lax.pmean(grads, axis_name="num_devices")
    loss = jax.lax.pmean(loss, axis_name="num_devices")
    new_params = jax.tree_util.tree_map(lambda p, g: p - STEP_SIZE * g, params, grads)
    return new_params, loss


data_rng = np.random.RandomState(7)
true_w, true_b = 2.0, -1.0
xs = data_rng.normal(size=(64, 1)).astype(np.float32)
ys = xs * true_w + true_b + 0.5 * data_rng.normal(size=(64, 1)).astype(np.float32)

params = init_model(jax.random.PRNGKey(123))
n_devices = jax.local_device_count()
replicated_params = jax.tree_util.tree_map(lambda x: jnp.array([x] * n_devices), params)


def split(array):
    """Rows per device: (n_devices, rows // n_devices, ...)."""
    return array.reshape(n_devices, array.shape[0] // n_devices, *array.shape[1:])


x_split = split(xs)
y_split = split(ys)

losses = []
for step in range(30):
    replicated_params, loss = update(replicated_params, x_split, y_split)
    losses.append(float(loss[0]))
    if step % 10 == 0:
        print(f"step {step:3d}, loss {loss[0]:.3f}")

trained = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], replicated_params))


def run():
    return {"losses": np.asarray(losses), "weight": np.asarray(trained.weight),
            "bias": np.asarray(trained.bias)}
