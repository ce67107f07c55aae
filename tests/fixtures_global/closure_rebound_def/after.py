"""A def nested in the training function, then rebound to its own pmap (brax's
`training_epoch = jax.pmap(training_epoch, axis_name=...)`): every call after the rebinding is
a call of the pmap, as under a decorator, so the site goes global."""
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


def train(steps):
    mesh = _mesh("batch")
    n = jax.local_device_count()
    lr = 0.1

    def train_step(w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0) * w, "batch")
        return w - lr * grad, jax.lax.pmean(jnp.sum(w), "batch")

    train_step = jax.jit(jax.shard_map(
        train_step,
        mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False,
    ))
    w = jax.device_put(jnp.ones(3, jnp.float32), NamedSharding(mesh, P()))
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3) / 10.0
    losses = []
    for _ in range(steps):
        w, loss = train_step(w, x)
        losses.append(float(loss))
    return np.asarray(w), np.asarray(losses)


def run():
    w, losses = train(3)
    return {"w": w, "losses": losses}
