"""flax's wmt and lm1b: `functools.partial(train_step, label_smoothing=config.label_smoothing)`
read from an attribute, for a step called with keywords, and one with a static argument. Both
become jitted defs, which read their names at each trace; pmap's partial read the attribute
once, where it was built. The migration binds it to a name there: the change to `config`
after the steps are built must not reach them."""
# pmap-migrate-test: original needs legacy jax
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np


def train_step(w, x, label_smoothing=0.0, dropout_rng=None):
    keep = jax.random.bernoulli(dropout_rng, 0.75, x.shape)
    grad = jax.lax.pmean(jnp.mean(keep * x, axis=0), "batch")
    return w - 0.1 * grad + label_smoothing


def eval_step(w, x, squared, scale=1.0):
    error = x @ w
    error = error ** 2 if squared else jnp.abs(error)
    return jax.lax.psum(jnp.sum(error) * scale, "batch")


def run():
    n = jax.local_device_count()
    config = types.SimpleNamespace(label_smoothing=0.25, scale=2.0)
    w = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    p_train_step = jax.pmap(
        functools.partial(train_step, label_smoothing=config.label_smoothing),
        axis_name="batch")
    p_eval_step = jax.pmap(functools.partial(eval_step, scale=config.scale), axis_name="batch",
                           static_broadcasted_argnums=(2,))
    config.label_smoothing, config.scale = 100.0, 100.0  # read by neither step
    rngs = jax.random.split(jax.random.PRNGKey(0), n)
    x = np.linspace(-1.0, 1.0, n * 12, dtype=np.float32).reshape(n, 4, 3)
    errors = []
    for _ in range(2):
        w = p_train_step(w, x, dropout_rng=rngs)
        errors.append(p_eval_step(w, x, True)[0])
        errors.append(p_eval_step(w, x, False)[0])
    return {"w": np.asarray(w[0]), "errors": np.asarray(errors)}
