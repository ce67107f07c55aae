"""pmap built in the calling function: assigned to a local name, called on the spot, and of a functools.partial callee."""
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


def step(w, x, lr):
    return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), "d")


@jax.jit
def mean(v):
    return jax.shard_map(
        lambda v: jax.lax.pmean(jnp.mean(v), "d"),
        mesh=_mesh("d"),
        in_specs=(P("d"),),
        out_specs=P(),
        check_vma=False,
    )(v)


@jax.jit
def doubled_sharded(v):
    return jax.shard_map(
        lambda v: v * 2, mesh=_mesh("d"), in_specs=(P("d"),), out_specs=P("d"), check_vma=False
    )(v)


@jax.jit
def p_step(w, x):
    return jax.shard_map(
        functools.partial(step, lr=0.5),
        mesh=_mesh("d"),
        in_specs=(P(), P("d")),
        out_specs=P(),
        check_vma=False,
    )(w, x)


def run():
    mesh = _mesh("d")
    n = jax.local_device_count()
    x = np.linspace(0.0, 1.0, n * 4 * 2, dtype=np.float32).reshape(n * 4, 2)
    m = mean(x)
    doubled = doubled_sharded(x)
    w = p_step(jax.device_put(jnp.zeros((2,)), NamedSharding(mesh, P())), x)
    return {"m": np.asarray(m), "doubled": np.asarray(doubled), "w": np.asarray(w)}
