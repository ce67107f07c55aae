"""A donating pmap called with keyword arguments (jaxline's `self._update_pmap(params=...)`):
pmap donates only what is passed by position, so the caller may read `params` again. The
contract form must not let jit read the step's signature and donate `params=` too."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def step(params, x):
    return params + jax.lax.psum(x.sum(), "i")


def run():
    n = jax.local_device_count()
    update = jax.jit(
        _per_device_shard_map(step, "i", in_specs=P("i"), out_specs=P("i")),
        donate_argnums=(0,),
    )
    params = jnp.arange(float(n))
    out = update(params=params, x=jnp.ones((n, 3)))
    return {"out": np.asarray(out), "params_after": np.asarray(params)}
