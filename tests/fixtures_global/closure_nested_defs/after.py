"""A training loop in one function: a nested def decorated with pmap and a nested def passed to
jax.pmap, both closing over the function's own locals (lr), go global with their caller."""
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


def train(steps, lr):
    mesh = _mesh("batch")
    n = jax.local_device_count()

    def _update(w, x, y):
        grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - lr * jax.lax.pmean(grad, "batch")

    @jax.jit
    def update(w, x, y):
        return jax.shard_map(
            _update,
            mesh=_mesh("batch"),
            in_specs=(P(), P("batch"), P("batch")),
            out_specs=P(),
            check_vma=False,
        )(w, x, y)

    def evaluate(w, x, y):
        return jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "batch")

    p_evaluate = jax.jit(jax.shard_map(
        evaluate,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    ))
    rng = np.random.RandomState(0)
    w = jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))
    for _ in range(steps):
        x = rng.normal(size=(n * 4, 3)).astype(np.float32)
        y = x @ np.array([1.0, -2.0, 0.5], np.float32)
        w = update(w, x.reshape(n * 4, 3), y.reshape(n * 4))
    loss = p_evaluate(w, x.reshape(n * 4, 3), y.reshape(n * 4))
    return w, loss


def run():
    w, loss = train(5, 0.1)
    return {"w": np.asarray(w), "loss": np.asarray(loss)}
