"""A factory returning a pmap of its own nested def, with axis_name a parameter every call
leaves to its default, stored (`update_fn = make_update_fn(0.1)`) and called later in a loop:
the stored name holds the factory's site, so its calls are the site's."""
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


def make_update_fn(lr, axis_name="batch"):
    def update(w, x):
        g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        g = jax.lax.pmean(g, axis_name)
        return w - lr * g

    return jax.jit(jax.shard_map(
        update,
        mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False,
    ))


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    update_fn = make_update_fn(0.1)
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3) / 10
    for _ in range(3):
        w = update_fn(w, x)
    spot = make_update_fn(0.05)(w, x)  # and called on the spot
    return {"w": np.asarray(w), "spot": np.asarray(spot)}
