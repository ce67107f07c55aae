"""PM600 for a pmap of a function whose body is not read (`jnp.dot`, a bound method, a local
name): called where it is built, with no options (so it names no axis and uses no
collective), it runs as `jax.vmap(f)` over each device's (1, ...) block of stacked rows, or on
replicated values as they are (out_specs P(): every device computes the same). Given a batch,
it sees one device's row under pmap, so the batch keeps pmap's stacked layout (its reshape is
left as written, PM611) and the function runs as jax.vmap over each device's block."""
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


class Sampler:
    def __init__(self, shape):
        self.shape = shape

    def draw(self, key):
        return {"x": jax.random.normal(key, self.shape), "key": key}


def run():
    mesh = _mesh("devices")
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    sampler = Sampler((3, 3))
    drawn = jax.jit(jax.shard_map(
        jax.vmap(sampler.draw),
        mesh=_mesh("devices"), in_specs=(P("devices"),), out_specs=P("devices"), check_vma=False,
    ))(keys)
    grams = jax.jit(jax.shard_map(
        jax.vmap(jnp.dot),
        mesh=_mesh("devices"),
        in_specs=(P("devices"), P("devices")),
        out_specs=P("devices"),
        check_vma=False,
    ))(drawn["x"], drawn["x"])
    means = jax.jit(jax.shard_map(
        jax.vmap(jnp.mean),
        mesh=_mesh("devices"), in_specs=(P("devices"),), out_specs=P("devices"), check_vma=False,
    ))(grams)
    w = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P()))
    total = jax.jit(jax.shard_map(
        jnp.sum,
        mesh=_mesh("devices"), in_specs=(P(),), out_specs=P(), check_vma=False,
    ))(w)
    return {"x": np.asarray(drawn["x"]), "means": np.asarray(means), "total": np.asarray(total)}


def batch_max():
    n = jax.local_device_count()
    batch = np.arange(n * 4.0).reshape(n, 4)
    return {"max": np.asarray(jax.jit(jax.shard_map(
        jax.vmap(jnp.max),
        mesh=_mesh("devices"), in_specs=(P("devices"),), out_specs=P("devices"), check_vma=False,
    ))(batch))}
