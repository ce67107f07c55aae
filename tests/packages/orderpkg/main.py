# pmap-migrate-test: original needs legacy jax
"""The trainer: parameters replicated onto the pipeline's devices, a pmapped SGD step."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from orderpkg import input_pipeline


def replicate(tree, devices=None):
    devices = devices or input_pipeline._pmap_device_order()
    return jax.device_put_replicated(tree, devices)


@functools.partial(jax.pmap, axis_name="batch")
def update(params, x):
    grads = jax.lax.pmean(jnp.mean(x, axis=0) * params["w"], "batch")
    return {"w": params["w"] - 0.1 * grads}


def shard(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


def run():
    params = replicate({"w": jnp.ones((3,), jnp.float32)})
    for step in range(3):
        params = update(params, shard(input_pipeline.host_batch(step)))
    return {"w": np.asarray(jax.device_get(params["w"])[0])}
