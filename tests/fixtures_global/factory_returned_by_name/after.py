"""A factory that binds its pmap (of functools.partial of a module-level def) to a name and
returns that name, stored by the caller (`update = make_update(0.5)`) and called later in a
loop: as `return jax.pmap(...)`, the stored name holds the factory's site."""
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


def sgd(w, x, lr):
    g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - lr * jax.lax.pmean(g, "devices")


def make_update(lr):
    update = jax.jit(jax.shard_map(
        functools.partial(sgd, lr=lr),
        mesh=_mesh("devices"), in_specs=(P(), P("devices")), out_specs=P(), check_vma=False,
    ))
    return update


def run():
    mesh = _mesh("devices")
    n = jax.local_device_count()
    update = make_update(0.5)
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    x = np.linspace(-1.0, 1.0, n * 2 * 3, dtype=np.float32).reshape(n * 2, 3)
    for _ in range(4):
        w = update(w, x)
    return {"w": np.asarray(w)}
