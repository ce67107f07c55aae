"""A module-level pmap of a bound method (the Stable Diffusion notebook's
`p_generate = pmap(pipeline._generate)`), without options, only ever called with the same
number of positional arguments: its body is not read, and it names no axis, so it runs per
device as it did. `model` is bound once and `_apply` never assigned: the migrated step, which
reads `model._apply` when it is traced, gets the object pmap read once where it was built."""
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


class Model:
    def __init__(self, scale):
        self.scale = scale

    def _apply(self, w, x):
        return jnp.tanh(x @ w) * self.scale


model = Model(0.5)


@jax.jit
def p_apply(_x0, _x1):
    return jax.shard_map(
        jax.vmap(model._apply, in_axes=(None, 0)),
        mesh=_mesh("devices"),
        in_specs=(P(), P("devices")),
        out_specs=P("devices"),
        check_vma=False,
    )(_x0, _x1)


def run():
    mesh = _mesh("devices")
    n = jax.local_device_count()
    w = jax.device_put(jnp.ones((3, 2)) * 0.1, NamedSharding(mesh, P()))
    x = jnp.arange(n * 4 * 3.0).reshape(n, 4, 3) / 10.0
    return {"y": np.asarray(p_apply(w, x))}
