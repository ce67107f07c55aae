"""Modelled on the last cell of JAX's Pmap Cookbook (the same cell is in JAX_demo): a pmap
defined and called inside the body of another pmap, differentiated through.

Sources: github.com/jax-ml/jax at commit c980dc4e2a8ddc040b4b76ceef5e6a448fcaf6b5
(2024-04-19): cloud_tpu_colabs/Pmap_Cookbook.ipynb and cloud_tpu_colabs/JAX_demo.ipynb.
All code here is written anew.

pmap features kept:
- a bare `@pmap` whose body defines a second bare `@pmap` closing over values of the outer
  body (`jnp.sin(x)` and `x` itself), takes `grad` through the inner pmap, and is itself
  differentiated from the host with `grad(lambda v: jnp.sum(outer(v)))`;
- the outer pmap maps n/2 rows, the inner one the 2 columns of each row.

Scaled down: an (n/2, 2) input, as in the notebooks.

The original needs jax 0.4.38: on jax 0.10 a pmap called inside another pmap is rejected
(the inner shard_map's mesh does not match the context mesh).
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import grad, pmap


@pmap
def outer_with_inner(x):
    s = jnp.sin(x)

    @pmap
    def inner(z):
        return jnp.cos(z) * jnp.tan(s.sum()) * jnp.tanh(x).sum()

    return grad(lambda w: jnp.sum(inner(w)))(x)


def run():
    n = jax.local_device_count()
    small = jnp.arange(n * 1.0).reshape((n // 2, 2)) / (2.0 * n)
    inner_grads = outer_with_inner(small)
    host_grads = grad(lambda v: jnp.sum(outer_with_inner(v)))(small)
    return {
        "inner_grads": np.asarray(inner_grads),
        "host_grads": np.asarray(host_grads),
    }
