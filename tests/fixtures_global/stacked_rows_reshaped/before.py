"""A replicated prompt reshaped with its own leading axis (flax lm1b's
`jnp.reshape(prompt, (prompt.shape[0], 1, prompt.shape[1]))`): the reshape keeps the device
axis, so the prompt keeps pmap's stacked layout through it and the step squeezes its row, as
it does for the per-device keys beside it."""
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
