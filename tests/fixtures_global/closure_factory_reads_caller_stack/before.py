"""A factory's returned def rebound to its pmap, where the caller passes the factory the
stacked parameters it also maps (`get_learner_fn(0.05, w)`): the closure reads that value as
the caller built it (every device sees the whole stack), so `w` keeps pmap's stacked layout
(PM611) while the site still goes global."""
import jax
import jax.numpy as jnp
import numpy as np


def get_learner_fn(lr, scale):
    def apply(w, x):
        return (x * jnp.sum(scale) / 6.0) @ w

    def learner_fn(w, x):
        grad = jax.grad(lambda w: jnp.mean(apply(w, x) ** 2))(w)
        grad = jax.lax.pmean(grad, "device")
        loss = jax.lax.pmean(jnp.mean(apply(w, x) ** 2), "device")
        return w - lr * grad, loss, jnp.sum(apply(w, x))  # the last one per device

    return learner_fn


def train(steps):
    n = jax.local_device_count()
    w = jnp.stack([jnp.ones((3, 2), jnp.float32)] * n)
    learn = get_learner_fn(0.05, w)
    learn = jax.pmap(learn, axis_name="device")
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0
    losses = []
    for _ in range(steps):
        w, loss, sums = learn(w, x)
        losses.append(float(loss[0]))
    return np.asarray(w[0]), np.asarray(losses), np.asarray(sums)


def run():
    w, losses, sums = train(3)
    return {"w": w, "losses": losses, "sums": sums}
