"""Multi-process: a step with static arguments (flax's predict step takes the EOS id and the
decode length as `static_broadcasted_argnums`). They stay plain values, jit's static
arguments; the mapped ones are each process's rows made global at the call."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def predict_step(inputs, params, eos_id, max_length):
    steps = jnp.arange(max_length, dtype=jnp.float32)
    scores = inputs[:, :1] * params + steps[None, :]
    return jnp.where(scores > eos_id, eos_id, scores)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    params = jax.device_put_replicated(jnp.float32(0.5), jax.local_devices())
    p_pred_step = jax.pmap(predict_step, axis_name="batch", static_broadcasted_argnums=(2, 3))
    predictions = []
    for max_length in (3, 5):
        inputs = rng.normal(size=(n, 2, 4)).astype(np.float32)
        predicted = p_pred_step(inputs, params, 1.0, max_length)
        predictions.append(np.asarray(predicted).reshape(-1))
    return {"predictions": np.concatenate(predictions)}
