"""A factory's returned def rebound to its pmap, where the caller passes the factory the
stacked parameters it also maps (`get_learner_fn(0.05, w)`): the closure reads that value as
the caller built it (every device sees the whole stack), so `w` keeps pmap's stacked layout
(PM611) while the site still goes global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def get_learner_fn(lr, scale):
    def apply(w, x):
        return (x * jnp.sum(scale) / 6.0) @ w

    def learner_fn(w, x):
        w = jax.tree.map(lambda y: jnp.squeeze(y, 0), w)
        grad = jax.grad(lambda w: jnp.mean(apply(w, x) ** 2))(w)
        grad = jax.lax.pmean(grad, "device")
        loss = jax.lax.pmean(jnp.mean(apply(w, x) ** 2), "device")
        return jax.tree.map(
            lambda y: jnp.expand_dims(y, 0), (w - lr * grad, loss, jnp.sum(apply(w, x)))
        )  # the last one per device

    return learner_fn


def train(steps):
    n = jax.local_device_count()
    w = jnp.stack([jnp.ones((3, 2), jnp.float32)] * n)
    learn = get_learner_fn(0.05, w)
    learn = jax.jit(jax.shard_map(
        learn,
        mesh=_mesh("device"),
        in_specs=(P("device"), P("device")),
        out_specs=P("device"),
        check_vma=False,
    ))
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3) / 10.0
    losses = []
    for _ in range(steps):
        w, loss, sums = learn(w, x)
        losses.append(float(loss[0]))
    return np.asarray(w[0]), np.asarray(losses), np.asarray(sums)


def run():
    w, losses, sums = train(3)
    return {"w": w, "losses": losses, "sums": sums}
