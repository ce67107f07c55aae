"""PM602: devices= a sub-list runs the site on fewer devices than the caller's mesh (it keeps
pmap's contract on those devices, PM612), and backend= picks a platform: it stays faithful."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map, _pmap_style_shard_map


def rms(x):
    return jnp.sqrt(jax.lax.pmean(jnp.mean(x * x), "i"))


def half_rms():
    n = jax.local_device_count()
    k = max(1, n // 2)
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return jax.jit(
        _per_device_shard_map(
            rms, "i", in_specs=P("i"), out_specs=P("i"), devices=tuple(jax.local_devices()[:k])
        )
    )(x[:k])


def cpu_rms():
    n = jax.local_device_count()
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    return _pmap_style_shard_map(rms, axis_name="i", backend="cpu")(x)


def run():
    return {"half": np.asarray(half_rms()), "cpu": np.asarray(cpu_rms())}
