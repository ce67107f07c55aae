"""A replicated tuple literal and a list result are sequences: `p[1]` and `out[0]` pick an element, not a device's row."""
# pmap-migrate-test: original needs legacy jax
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


def _step(p, x):
    return [p[0] + jax.lax.psum(jnp.sum(x), "i"), p[1]]


@jax.jit
def step(p, x):
    return jax.shard_map(
        _step, mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=P(), check_vma=False
    )(p, x)


def run():
    mesh = _mesh("i")
    n = jax.local_device_count()
    p = jax.device_put((jnp.arange(3.0), jnp.ones(2)), NamedSharding(mesh, P()))
    x = np.arange(n * 2, dtype=np.float32)
    out = step(p, x)
    return {"a": np.asarray(out[0]), "b": np.asarray(p[1])}
