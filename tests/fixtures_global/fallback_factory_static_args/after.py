"""A factory returning a pmap with static_broadcasted_argnums. The global style writes a step
with static arguments as a jitted def; for a factory that def took the factory's own name and
place (`def make_train_step(params, x, k)`), so `make_train_step()` failed in the migrated
program (found by the fuzz sweep, present since factories went global). Until the jitted step
is written inside the factory, the site keeps pmap's calling convention, and says why."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def _step(params, x, k):
    h = jax.lax.psum(x * params * k, "batch")
    return params * 0.5 + jnp.mean(h) * 0.25, jax.lax.pmean(jnp.sum(h), "batch")


def make_train_step():
    return jax.jit(
        _per_device_shard_map(
            _step,
            "batch",
            in_specs=(P("batch"), P("batch")),
            out_specs=P("batch"),
            static_argnums=(2,),
        ),
        static_argnums=(2,),
        donate_argnums=0,
    )


def run():
    n = jax.local_device_count()
    params = jnp.stack([jnp.arange(2.0)] * n)
    train_step = make_train_step()
    losses = []
    for t in range(2):
        x = (np.arange(n * 2, dtype=np.float32) + t).reshape(n, 1, 2)
        params, loss = train_step(params, x, 2)
        losses.append(np.asarray(loss[0]))
    return {"losses": np.asarray(losses), "params": np.asarray(params[0])}
