"""A module constant replicated for a donating step: the original's replicas are copies, so W
survives the donation. The migration places a copy of W (device_put of W itself, even with
may_alias=False, reuses W's buffer on its device and the step would delete it)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

W = jnp.ones((3,), jnp.float32)


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _step(params, x):
    return params + jax.lax.pmean(x, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def step(params, x):
    return jax.shard_map(
        _step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(params, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    params = jax.device_put(jax.tree.map(jnp.copy, W), NamedSharding(mesh, P()))
    x = np.arange(n * 3, dtype=np.float32)
    params = step(params, x)
    return {"out": np.asarray(params), "w_after": np.asarray(W)}
