"""A replicated stack formatted into a string (`f"{stats}"`): pmap's n equal rows are its text.
The migrated value is one row, so the field formats it repeated back to n rows, leaf by leaf
(a jax Array stays one, a host array numpy): the same text, and the step goes global."""
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


def _device_rows(tree):
    """pmap's n equal rows of replicated `tree`, leaf by leaf, so its f-string text stays."""
    return jax.tree.map(lambda v: v[None].repeat(jax.local_device_count(), axis=0), tree)


@jax.jit
def step(p, x):
    return jax.shard_map(
        lambda p, x: ({"w": p * 2.0, "n": jax.lax.psum(jnp.sum(x), "b")}, p + 1.0),
        mesh=_mesh("b"),
        in_specs=(P(), P("b")),
        out_specs=P(),
        check_vma=False,
    )(p, x)


def run():
    mesh = _mesh("b")
    n = jax.local_device_count()
    params = jax.device_put(jnp.arange(3.0), NamedSharding(mesh, P()))
    x = np.arange(n * 2, dtype=np.float32)
    stats, params = step(params, x)
    text = f"stats {_device_rows(stats)} params {_device_rows(params)!s}"
    host = jax.device_get(stats)
    text += f" host {_device_rows(host)}"
    return {"text": np.frombuffer(text.encode(), dtype=np.uint8), "params": np.asarray(params)}
