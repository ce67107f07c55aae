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
from jax.sharding import AxisType, PartitionSpec as P
from _pmap_helpers import _device_put_replicated


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _predict_step(prompt, key):
    key = jax.tree.map(lambda y: jnp.squeeze(y, 0), key)
    noise = jax.random.normal(key, prompt.shape)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), prompt * 2.0 + noise)


@jax.jit
def predict_step(prompt, key):
    return jax.shard_map(
        _predict_step,
        mesh=_mesh("batch"),
        in_specs=(P("batch"), P("batch")),
        out_specs=P("batch"),
        check_vma=False,
    )(prompt, key)


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    prompt = jnp.array(np.arange(5, dtype=np.float32))
    prompt = _device_put_replicated(prompt, jax.local_devices())
    prompt = jnp.reshape(prompt, (prompt.shape[0], prompt.shape[1]))
    predicted = predict_step(prompt, keys)
    flat = predicted.reshape(-1)
    return {"predicted": np.asarray(predicted), "flat": np.asarray(flat)}
