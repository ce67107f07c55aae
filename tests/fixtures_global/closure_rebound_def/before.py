"""A def nested in the training function, then rebound to its own pmap (brax's
`training_epoch = jax.pmap(training_epoch, axis_name=...)`): every call after the rebinding is
a call of the pmap, as under a decorator, so the site goes global."""
import jax
import jax.numpy as jnp
import numpy as np


def train(steps):
    n = jax.local_device_count()
    lr = 0.1

    def train_step(w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0) * w, "batch")
        return w - lr * grad, jax.lax.pmean(jnp.sum(w), "batch")

    train_step = jax.pmap(train_step, axis_name="batch")
    w = jnp.stack([jnp.ones(3, jnp.float32)] * n)
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0
    losses = []
    for _ in range(steps):
        w, loss = train_step(w, x)
        losses.append(float(loss[0]))
    return np.asarray(w[0]), np.asarray(losses)


def run():
    w, losses = train(3)
    return {"w": w, "losses": losses}
