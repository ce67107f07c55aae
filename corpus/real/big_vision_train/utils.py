"""Modelled on big_vision/utils.py (google-research/big_vision @ 50622cb37bc4, the parent of
538b8a8 "jit transition"): the losses, mixup (with its per-device `fold_in` of
`lax.axis_index("batch")`), the step predicate, and `sync()` (a `jax.pmap(_sync, "i")` of
a psum over a ones vector, read back with `device_get` and `x[0]`). Written anew."""
import jax
import jax.numpy as jnp


def sigmoid_xent(*, logits, labels, reduction=True):
    log_p = jax.nn.log_sigmoid(logits)
    log_not_p = jax.nn.log_sigmoid(-logits)
    nll = -jnp.sum(labels * log_p + (1.0 - labels) * log_not_p, axis=-1)
    return jnp.mean(nll) if reduction else nll


def softmax_xent(*, logits, labels, reduction=True):
    nll = -jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1)
    return jnp.mean(nll) if reduction else nll


def mixup(rng, *things, p=0.1, fold_in=None, n=2):
    """Mix each example with its `n - 1` neighbours in the batch (Dirichlet weights)."""
    rng, rng_m = jax.random.split(rng, 2)
    if fold_in == "device":
        rng_m = jax.random.fold_in(rng_m, jax.lax.axis_index("batch"))
    alpha = jax.random.dirichlet(rng_m, jnp.array([p] * n), (1,))
    alpha = -jnp.sort(-alpha, axis=-1)

    def mix(batch):
        def mul(a, b):
            return b * jnp.expand_dims(a, tuple(range(1, b.ndim)))
        return sum(mul(alpha[:, i], jnp.roll(batch, i, axis=0)) for i in range(n))

    return rng, list(map(mix, things))


def itstime(step, every_n_steps, total_steps, first=True, last=True):
    is_last = last and step == total_steps
    is_first = first and step == 1
    return is_last or is_first or (every_n_steps and step % every_n_steps == 0)


def _sync(x):
    return jax.lax.psum(x, "i")


def sync():
    """Empties the async queue: every device adds its one, every device must see them all."""
    x = jnp.ones([jax.local_device_count()])
    x = jax.device_get(jax.pmap(_sync, "i")(x))
    assert x[0] == jax.device_count()
