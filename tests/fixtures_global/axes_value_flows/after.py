"""A value flows from a site of one axis name to a site of another, and is donated there: the
two meshes have the same devices in the same order, so P("i") on one is P("j") on the other."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P("i"),), out_specs=P("i"), check_vma=False)
def centered(x):
    return x - jax.lax.pmean(x, "i")


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(jax.shard_map, in_specs=(P("j"), P()), out_specs=P("j"), check_vma=False)
def scaled(x, w):
    return x * w / (jax.lax.pmax(jnp.max(jnp.abs(x)), "j") + 1.0)


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    mesh_j = jax.make_mesh((jax.device_count(),), ("j",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 3, dtype=np.float32)
        w = jax.device_put(jnp.float32(2.0), P())
        c = centered(x)
        for _ in range(2):
            with jax.set_mesh(mesh_j):
                c = scaled(c, w)
            c = centered(c)
        return {"c": np.asarray(c), "w": np.asarray(w)}
