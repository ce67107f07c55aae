"""A replicated stack formatted by `repr` (`f"{params!r}"`): not followed (a jax Array's repr
is read apart from its rows' text), so the step keeps pmap's contract, naming the field."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map, _device_put_replicated

step = jax.jit(_per_device_shard_map(lambda p: p + 1.0, "b", in_specs=P("b"), out_specs=P("b")))


def run():
    params = _device_put_replicated(jnp.arange(3.0), jax.local_devices())
    params = step(params)
    text = f"params {params!r}"
    return {"text": np.frombuffer(text.encode(), dtype=np.uint8), "params": np.asarray(params[0])}
