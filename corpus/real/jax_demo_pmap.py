"""Modelled on the pmap section of JAX's JAX_demo notebook.

Source: github.com/jax-ml/jax, cloud_tpu_colabs/JAX_demo.ipynb, read at commit
c980dc4e2a8ddc040b4b76ceef5e6a448fcaf6b5 (2024-04-19). All code here is written anew.

pmap features kept:
- `from jax import pmap`; an inline `pmap(lambda x: x ** 2)(jnp.arange(n))` whose output
  is then used as an array (`y / 2`);
- one PRNG key per device (`random.split(key, n)`) mapped into a sampler by an inline
  lambda pmap, then `pmap(jnp.dot)(mats, mats)` and `pmap(jnp.mean)(...)`: library
  functions as pmap callees;
- `@partial(pmap, axis_name="i")` with `lax.psum` normalisation;
- `pmap(hessian(fn))`: the pmapped callee is a `jax.jit` object built from curried
  forward-over-reverse Jacobians (`jvp`/`vjp` under `vmap`), and `fn` is a lambda closing
  over a list of (W, b) tuples of device arrays (the trained MLP) and the full target
  array; it maps over one input example per device.

Scaled down: random matrices are (n, 64, 64) instead of (8, 5000, 5000); the MLP and its
20 plain gradient-descent steps are the notebook's sizes ([5, 2, 3], n examples). Timing
cells and plots are dropped; the notebook's nested-pmap cells are in
`cookbook_nested_pmap.py` and `pmap_in_pmap_grad.py` (they do not run on jax 0.10).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import grad, jvp, lax, pmap, random, vjp, vmap


def mlp(params, inputs):
    for weight, bias in params:
        hidden = jnp.dot(inputs, weight) + bias
        inputs = jnp.tanh(hidden)
    return hidden


def squared_error(params, batch):
    inputs, targets = batch
    return jnp.sum((mlp(params, inputs) - targets) ** 2)


def new_layer(key, fan_in, fan_out):
    kw, kb = random.split(key)
    return random.normal(kw, (fan_in, fan_out)), random.normal(kb, (fan_out,))


curried = lambda f: functools.partial(functools.partial, f)


@curried
def forward_jacobian(fun, x):
    push = functools.partial(jvp, fun, (x,))
    basis = (jnp.eye(np.size(x)).reshape((-1,) + jnp.shape(x)),)
    y, cols = vmap(push, out_axes=(None, -1))(basis)
    return cols.reshape(jnp.shape(y) + jnp.shape(x))


@curried
def reverse_jacobian(fun, x):
    y, pull = vjp(fun, x)
    basis = jnp.eye(np.size(y)).reshape((-1,) + jnp.shape(y))
    (rows,) = vmap(pull)(basis)
    return rows.reshape(jnp.shape(y) + jnp.shape(x))


def hessian(fun):
    return jax.jit(forward_jacobian(reverse_jacobian(fun)))


@functools.partial(pmap, axis_name="i")
def normalise(x):
    return x / lax.psum(x, "i")


def run():
    n = jax.local_device_count()
    out = {}

    y = pmap(lambda x: x ** 2)(jnp.arange(n))
    out["squares"] = np.asarray(y)
    out["halved"] = np.asarray(y / 2)

    keys = random.split(random.PRNGKey(0), n)
    mats = pmap(lambda key: random.normal(key, (64, 64)))(keys)
    products = pmap(jnp.dot)(mats, mats)
    out["product_means"] = np.asarray(pmap(jnp.mean)(products))

    out["normalised"] = np.asarray(normalise(jnp.arange(1.0, n + 1.0)))

    sizes = [5, 2, 3]
    key = random.PRNGKey(0)
    key, *layer_keys = random.split(key, len(sizes))
    params = list(map(new_layer, layer_keys, sizes[:-1], sizes[1:]))
    key, *data_keys = random.split(key, 3)
    inputs = random.normal(data_keys[0], (n, 5))
    targets = random.normal(data_keys[1], (n, 3))
    out["loss_before"] = np.asarray(squared_error(params, (inputs, targets)))
    lr = 1e-2
    for _ in range(20):
        grads = grad(squared_error)(params, (inputs, targets))
        params = [(w - lr * dw, b - lr * db) for (w, b), (dw, db) in zip(params, grads)]
    out["loss_after"] = np.asarray(squared_error(params, (inputs, targets)))

    input_hessian = hessian(lambda x: squared_error(params, (x, targets)))
    per_example_hessian = pmap(input_hessian)
    out["hessians"] = np.asarray(per_example_hessian(inputs))
    return out
