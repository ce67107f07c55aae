"""PM611 with a lambda: per-device keys, and a step's per-device results, keep pmap's stacked
layout, and the lambda runs as `jax.vmap(lambda ...)` over each device's (1, ...) block (a
replicated argument gets in_axes None). A lambda over stacked rows whose result is the same
on every device (a psum) keeps the device axis vmap gives it, as pmap's result had it; the
sites without an axis name run under the mesh of its axis "d"."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def run():
    mesh = _mesh("d")
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    mats = jax.jit(jax.shard_map(
        jax.vmap(lambda key: jax.random.normal(key, (4, 3))),
        mesh=_mesh("d"), in_specs=(P("d"),), out_specs=P("d"), check_vma=False,
    ))(keys)
    scale = jax.device_put(jnp.float32(0.5), NamedSharding(mesh, P()))
    scaled = jax.jit(jax.shard_map(
        jax.vmap(lambda m, s: m.T @ m * s, in_axes=(0, None)),
        mesh=_mesh("d"), in_specs=(P("d"), P()), out_specs=P("d"), check_vma=False,
    ))(mats, scale)
    total = jax.jit(jax.shard_map(
        jax.vmap(lambda k: jax.lax.psum(jax.random.uniform(k), "d")),
        mesh=_mesh("d"), in_specs=(P("d"),), out_specs=P("d"), check_vma=False,
    ))(keys)
    return {"mats": np.asarray(mats), "scaled": np.asarray(scaled), "total": np.asarray(total)}
