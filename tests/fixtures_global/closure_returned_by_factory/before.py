"""A module function that returns one of its nested defs (a closure over the call's
arguments), whose result the caller then rebinds to its pmap (Mava's `learn =
get_learner_fn(...)`, then `learn = jax.pmap(learn, axis_name=...)`): the mapped function is
that def, with the factory call's arguments bound, so the site goes global."""
import jax
import jax.numpy as jnp
import numpy as np


def get_learner_fn(lr, scale):
    def apply(w, x):
        return (x * scale) @ w

    def learner_fn(w, x):
        grad = jax.grad(lambda w: jnp.mean(apply(w, x) ** 2))(w)
        grad = jax.lax.pmean(grad, "device")
        loss = jax.lax.pmean(jnp.mean(apply(w, x) ** 2), "device")
        return w - lr * grad, loss, jnp.sum(apply(w, x))  # the last one per device

    return learner_fn


def train(steps):
    n = jax.local_device_count()
    scale = jnp.arange(3, dtype=jnp.float32) + 1.0
    learn = get_learner_fn(0.05, scale)
    learn = jax.pmap(learn, axis_name="device")
    w = jnp.stack([jnp.ones((3, 2), jnp.float32)] * n)
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0
    losses = []
    for _ in range(steps):
        w, loss, sums = learn(w, x)
        losses.append(float(loss[0]))
    return np.asarray(w[0]), np.asarray(losses), np.asarray(sums)


def run():
    w, losses, sums = train(3)
    return {"w": w, "losses": losses, "sums": sums}
