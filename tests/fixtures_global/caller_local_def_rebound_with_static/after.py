"""A def nested in the caller rebound to its own pmap (`step = jax.pmap(step, ...)`), with a
static argument, so the global style writes a jitted def of that name. The body's def is
renamed `_step`: a new def `step` that called `step` would call itself (the fuzz sweep found
the migrated program failing in a nested shard_map)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def run():
    n = jax.local_device_count()
    params = jnp.stack([jnp.arange(2.0)] * n)
    c = np.array([0.5, -1.0], np.float32)

    def _step(params, x, c, k):
        params = jax.tree.map(lambda y: jnp.squeeze(y, 0), params)
        h = jax.lax.pmax(x * params + c * 0.5, axis_name="batch") * k
        return jax.tree.map(
            lambda y: jnp.expand_dims(y, 0), (params * 0.5 + jnp.mean(h) * 0.25, jnp.sum(h))
        )

    @functools.partial(jax.jit, static_argnums=3)
    def step(params, x, c, k):
        return jax.shard_map(
            lambda params, x, c: _step(params, x, c, k),
            mesh=_mesh("batch"),
            in_specs=(P("batch"), P("batch"), P()),
            out_specs=P("batch"),
            check_vma=False,
        )(params, x, c)

    losses = []
    for t in range(2):
        x = (np.arange(n * 2, dtype=np.float32) + t).reshape(n, 2)
        params, loss = step(params, x, c, 2)
        losses.append(np.asarray(loss))
    return {"losses": np.asarray(losses), "params": np.asarray(params)}
