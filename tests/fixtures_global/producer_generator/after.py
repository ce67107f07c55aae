"""Per-device batches built and yielded by a module generator that only the step's caller uses: the reshape to (n, per_device, ...) becomes one global batch axis, and `next()` / `for` hand it to the step."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

PER_DEVICE = 2


@jax.jit
@functools.partial(
    jax.shard_map, in_specs=(P(), P("batch"), P("batch")), out_specs=P(), check_vma=False
)
def train_step(w, x, y):
    grad = jax.grad(lambda v: jnp.mean((x @ v - y) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grad, "batch")


def batches(x, y, n):
    size = n * PER_DEVICE
    for start in range(0, len(x) - size + 1, size):
        yield x[start:start + size].reshape(n * PER_DEVICE, -1), y[start:start + size].reshape(n * PER_DEVICE)


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.linspace(-1.0, 1.0, n * PER_DEVICE * 3 * 4, dtype=np.float32).reshape(-1, 3)
        y = x @ np.array([1.0, -1.0, 0.5], np.float32)
        w = jax.device_put(jnp.zeros(3), P())
        data = batches(x, y, n)
        xb, yb = next(data)
        w = train_step(w, xb, yb)
        for xb, yb in data:
            w = train_step(w, xb, yb)
        return {"w": np.asarray(w)}
