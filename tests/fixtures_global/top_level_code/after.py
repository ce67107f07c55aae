"""Top-level code is a caller like any function: a script (or a notebook, a tutorial) that
drives its steps at module level goes global. Its module-level names are globals, so one
that a function reads keeps the layout the function expects (`scale` reads `factors`, a
replicated stack, and so it stays stacked)."""
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


def _step(w, x):
    g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
    return w - 0.1 * g


@jax.jit
def step(w, x):
    return jax.shard_map(
        _step, mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=P(), check_vma=False
    )(w, x)


def _scaled(v, factor):
    factor = jax.tree.map(lambda y: jnp.squeeze(y, 0), factor)
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), v * factor)


@jax.jit
def scaled(v, factor):
    return jax.shard_map(
        _scaled, mesh=_mesh("i"), in_specs=(P("i"), P("i")), out_specs=P("i"), check_vma=False
    )(v, factor)


n = jax.local_device_count()
w = jax.device_put(jnp.zeros((3,)), NamedSharding(_mesh("i"), P()))
rng = np.random.RandomState(0)
for t in range(3):
    x = rng.normal(size=(n * 4, 3))
    w = step(w, x)
final = np.asarray(w)

doubled = jax.jit(jax.shard_map(
    lambda v: v * 2,
    mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False,
))(np.arange(n, dtype=np.float32))
factors = np.stack([np.float32(3.0)] * n)
rows = np.arange(n * 2, dtype=np.float32)
tripled = scaled(rows, factors)


def scale():
    return np.asarray(factors)


def run():
    return {"final": final, "doubled": np.asarray(doubled), "tripled": np.asarray(tripled),
            "factors": scale()}
