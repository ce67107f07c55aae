# pmap-migrate-test: original needs legacy jax
"""A training loop's fixed batch, made once with `jnp.asarray` from a host draw of shape
(n, b, d). pmap split that stacked batch over its devices at every call; the global style
places the merged batch with its sharding where it is made, so no step call moves it again."""
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


def _train_step(w, x, y):
    def loss(w):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    grads = jax.lax.pmean(jax.grad(loss)(w), "batch")
    return w - 0.1 * grads, jax.lax.pmean(loss(w), "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(w, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=(P(), P()),
        check_vma=False,
    )(w, x, y)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.default_rng(0)
    w = jax.device_put(jnp.eye(4) * 0.5, NamedSharding(mesh, P()))
    x = jax.device_put(
        jnp.asarray(rng.normal(size=(n * 8, 4)).astype(np.float32)),
        NamedSharding(mesh, P("batch")),
    )
    y = jax.device_put(
        jnp.array(rng.normal(size=(n * 8, 4)), dtype=jnp.float32), NamedSharding(mesh, P("batch"))
    )
    losses = []
    for _ in range(3):
        w, loss = train_step(w, x, y)
        losses.append(loss)
    return {"w": np.asarray(w), "losses": np.asarray(losses), "x_mean": np.asarray(x.mean())}
