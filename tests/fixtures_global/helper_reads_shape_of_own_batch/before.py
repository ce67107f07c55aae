"""flax's wmt and lm1b: `tohost(x)` flattens a per-device batch's first two axes on the host,
called on a batch `translate` shards itself and on the step's per-device results. That batch
keeps pmap's stacked layout, so `tohost` serves both calls unchanged."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


def tohost(x):
    n_device, n_batch, *remaining_dims = x.shape
    return np.array(x).reshape((n_device * n_batch,) + tuple(remaining_dims))


def predict_step(inputs, params):
    return inputs * params + jax.lax.axis_index("batch").astype(jnp.float32)


def translate(*, p_pred_step, params, batches):
    n_devices = jax.local_device_count()
    sources, predictions = [], []
    for batch in batches:
        batch = batch.reshape((n_devices, -1) + batch.shape[1:])
        predicted = p_pred_step(batch, params)
        predictions.append(tohost(predicted))
        sources.append(tohost(batch))
    return np.concatenate(sources), np.concatenate(predictions)


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.float32(2.0), jax.local_devices())
    p_pred_step = jax.pmap(predict_step, axis_name="batch")
    batches = [np.arange(n * 6, dtype=np.float32).reshape(n * 2, 3) + i for i in range(2)]
    sources, predictions = translate(p_pred_step=p_pred_step, params=params, batches=batches)
    return {"sources": sources, "predictions": predictions}
