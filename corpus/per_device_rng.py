"""Per-device RNG: split one PRNGKey into n keys and pmap a sampler over them.

The body also folds lax.axis_index into the key to derive a second, index-keyed stream.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="dev")
def sample(key, scale):
    noise = jax.random.normal(key, (4,)) * scale
    idx = jax.lax.axis_index("dev")
    idx_key = jax.random.fold_in(key, idx)
    uniform = jax.random.uniform(idx_key, (2,))
    return noise, uniform, idx


def dropout_mask(key, rate=0.5):
    idx = jax.lax.axis_index("d")
    key = jax.random.fold_in(key, idx)
    keep = jax.random.bernoulli(key, 1.0 - rate, (6,))
    return keep.astype(jnp.float32)


def run():
    n = jax.local_device_count()
    key = jax.random.PRNGKey(42)
    keys = jax.random.split(key, n)
    scale = jnp.arange(1, n + 1, dtype=jnp.float32)
    noise, uniform, idx = sample(keys, scale)

    # Same key on every device: only the fold_in(axis_index) makes masks differ.
    same_keys = jnp.broadcast_to(jax.random.PRNGKey(7), (n, 2))
    masks = jax.pmap(dropout_mask, axis_name="d")(same_keys)

    return {
        "noise": np.asarray(noise),
        "uniform": np.asarray(uniform),
        "axis_index": np.asarray(idx),
        "masks": np.asarray(masks),
        "distinct_rows": np.asarray(len({tuple(r) for r in np.asarray(noise / scale[:, None])})),
    }
