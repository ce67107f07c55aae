"""Per-device batches with jax.device_put_sharded of rows, and of a row-wise function of rows."""
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


def _train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def run():
    mesh = _mesh("batch")
    devices = jax.local_devices()
    n = len(devices)
    params = jax.device_put(
        {"w": np.zeros((3,), np.float32), "b": np.float32(0.0)}, NamedSharding(mesh, P())
    )
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(n * 4, 3)).astype(np.float32)
    x = jax.device_put(xs, NamedSharding(mesh, P("batch")))
    y = jax.device_put(xs @ np.ones((3,), np.float32), NamedSharding(mesh, P("batch")))
    params, loss = train_step(params, x, y)
    return {"loss": np.asarray(loss)}
