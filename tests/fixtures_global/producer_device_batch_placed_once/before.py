# pmap-migrate-test: original needs legacy jax
"""A training loop's fixed batch, made once with `jnp.asarray` from a host draw of shape
(n, b, d). pmap split that stacked batch over its devices at every call; the global style
places the merged batch with its sharding where it is made, so no step call moves it again."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(w, x, y):
    def loss(w):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

    grads = jax.lax.pmean(jax.grad(loss)(w), "batch")
    return w - 0.1 * grads, jax.lax.pmean(loss(w), "batch")


def run():
    n = jax.local_device_count()
    rng = np.random.default_rng(0)
    w = jax.device_put_replicated(jnp.eye(4) * 0.5, jax.local_devices())
    x = jnp.asarray(rng.normal(size=(n, 8, 4)).astype(np.float32))
    y = jnp.array(rng.normal(size=(n, 8, 4)), dtype=jnp.float32)
    losses = []
    for _ in range(3):
        w, loss = train_step(w, x, y)
        losses.append(loss[0])
    return {"w": np.asarray(w[0]), "losses": np.asarray(losses), "x_mean": np.asarray(x.mean())}
