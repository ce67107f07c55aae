"""pmap's stacked rows stay rows through `x.at[i].set(v)`, so a value built that way keeps its
device axis (PM611) and the site goes global; `steps * jnp.ones(n)` (a local number times a
replicated stack) is replicated. The mapped function starts with a decorated def, and the
statement that squeezes the device axis goes above its decorator. (After the Lorenz ODE
example of JAX's cloud_tpu_colabs.)"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def integrate(path, dt, length):
    path = jax.tree.map(lambda y: jnp.squeeze(y, 0), path)

    @jax.jit
    def one_step(i, path):
        return path.at[i].set(path[i - 1] * 0.9 + dt)

    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), lax.fori_loop(1, length, one_step, path))


@jax.jit
def integrate_sharded(path, dt, length):
    return jax.shard_map(
        integrate,
        mesh=_mesh("devices"),
        in_specs=(P("devices"), P(), P()),
        out_specs=P("devices"),
        check_vma=False,
    )(path, dt, length)


def run():
    mesh = _mesh("devices")
    n = jax.local_device_count()
    steps = 6
    paths = jnp.zeros((n, steps, 2))
    paths = paths.at[:, 0].set(jnp.ones((n, 2)) * 0.5)
    paths = integrate_sharded(
        paths,
        0.1 * jax.device_put(jnp.ones(()), NamedSharding(mesh, P())),
        steps * jax.device_put(jnp.ones((), dtype=np.int32), NamedSharding(mesh, P())),
    )
    grid = jnp.arange(n * 2.0).reshape((n, 2)) / (4.0 * n)
    shifted = jax.jit(
        _per_device_shard_map(
            lambda g: g + 1.0, "devices", in_specs=P("devices"), out_specs=P("devices")
        )
    )
    return {"paths": np.asarray(paths), "grid": np.asarray(jax.vmap(shifted)(grid[None]))}
