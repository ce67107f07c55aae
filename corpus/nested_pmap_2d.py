"""Data parallel over model parallel, 2023-24 style: an outer pmap over 'data' of an inner
pmap over 'model'. The hidden layer is split over 'model' (psum joins it), the batch over
'data' (pmean averages the gradients); params are shared by the data replicas
(in_axes=None / out_axes=None on the outer level). A plain pmap counts the predictions.
"""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np

LR = 0.05


def _loss(params, x, y):
    w, v = params  # this device's slice of the hidden layer
    hidden = jax.nn.relu(x @ w)
    pred = jax.lax.psum(hidden @ v, "model")
    return jnp.mean((pred - y) ** 2), pred


@functools.partial(jax.pmap, axis_name="data", in_axes=(None, 0, 0), out_axes=(None, 0, 0))
@functools.partial(jax.pmap, axis_name="model", in_axes=(0, None, None))
def train_step(params, x, y):
    (loss, pred), grads = jax.value_and_grad(_loss, has_aux=True)(params, x, y)
    grads = jax.lax.pmean(grads, "data")
    new_params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return new_params, jax.lax.pmean(loss, "data"), pred


p_positive = jax.pmap(lambda p: jax.lax.psum(jnp.sum(p > 0), "all"), axis_name="all")


def mesh_shape(n):
    model = 2 if n % 2 == 0 else 1
    return n // model, model


def run():
    n = jax.local_device_count()
    data, model = mesh_shape(n)
    rng = np.random.RandomState(0)
    features, hidden, batch = 3, 4 * model, 5
    w = rng.normal(size=(features, hidden)).astype(np.float32)
    v = rng.normal(size=(hidden,)).astype(np.float32) * 0.5
    params = (
        np.stack(np.split(w, model, axis=1)),  # (model, features, hidden / model)
        np.stack(np.split(v, model)),  # (model, hidden / model)
    )
    x = rng.normal(size=(data, batch, features)).astype(np.float32)
    y = (x.sum(-1) * 0.5).astype(np.float32)
    losses = []
    for _ in range(3):
        params, loss, pred = train_step(params, x, y)
        losses.append(np.asarray(loss))
    flat = np.asarray(pred).reshape(n, -1)
    return {
        "losses": np.stack(losses),
        "w": np.asarray(params[0]),
        "v": np.asarray(params[1]),
        "pred": np.asarray(pred),
        "positive": np.asarray(p_positive(flat)),
    }
