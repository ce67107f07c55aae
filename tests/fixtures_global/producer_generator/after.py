"""Per-device batches built and yielded by a module generator that only the step's caller uses: the reshape to (n, per_device, ...) becomes one global batch axis, and `next()` / `for` hand it to the step."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

PER_DEVICE = 2


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(w, x, y):
    grad = jax.grad(lambda v: jnp.mean((x @ v - y) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grad, "batch")


@jax.jit
def train_step(w, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, x, y)


def batches(x, y, n):
    size = n * PER_DEVICE
    for start in range(0, len(x) - size + 1, size):
        yield (
            x[start:start + size].reshape(n * PER_DEVICE, -1),
            y[start:start + size].reshape(n * PER_DEVICE),
        )


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    x = np.linspace(-1.0, 1.0, n * PER_DEVICE * 3 * 4, dtype=np.float32).reshape(-1, 3)
    y = x @ np.array([1.0, -1.0, 0.5], np.float32)
    w = jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))
    data = batches(x, y, n)
    xb, yb = next(data)
    w = train_step(w, xb, yb)
    for xb, yb in data:
        w = train_step(w, xb, yb)
    return {"w": np.asarray(w)}
