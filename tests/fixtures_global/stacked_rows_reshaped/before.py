"""A replicated prompt reshaped with its own leading axis (flax lm1b's
`jnp.reshape(prompt, (prompt.shape[0], 1, prompt.shape[1]))`): `.shape[0]` of a value in
pmap's stacked layout is the device count, so the reshape to (n, 1, L) is a per-device batch of
one row each, merged as any (n, rows, ...) reshape is; the per-device keys beside it keep pmap's
stacked layout, and the result's (n, -1) reshape merges too."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def predict_step(prompt, key):
    noise = jax.random.normal(key, prompt.shape)
    return prompt * 2.0 + noise


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    prompt = jnp.array(np.arange(5, dtype=np.float32))
    prompt = jax.device_put_replicated(prompt, jax.local_devices())
    prompt = jnp.reshape(prompt, (prompt.shape[0], 1, prompt.shape[1]))
    predicted = predict_step(prompt, keys)
    flat = predicted.reshape(predicted.shape[0], -1)
    return {"predicted": np.asarray(predicted), "flat": np.asarray(flat)}
