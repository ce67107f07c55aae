"""A factory's nested def rebound to its pmap by the caller, but the factory is also called
elsewhere (another pmap of its result): the global rewrite may edit the def's body (expand a
per-device result), which the other call would see, so the site keeps pmap's calling contract
and says why."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


def get_step_fn(lr):
    def step_fn(w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0) * w, "device")
        return w - lr * grad, jnp.sum(x * w)

    return step_fn


def train(steps):
    n = jax.local_device_count()
    step = get_step_fn(0.1)
    step = jax.jit(
        _per_device_shard_map(step, "device", in_specs=P("device"), out_specs=P("device"))
    )
    w = jnp.stack([jnp.ones(3, jnp.float32)] * n)
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0
    for _ in range(steps):
        w, per_device = step(w, x)
    return np.asarray(w[0]), np.asarray(per_device)


def evaluate(w, x):
    frozen = jax.jit(
        _per_device_shard_map(
            get_step_fn(0.0), "device", in_specs=P("device"), out_specs=P("device")
        )
    )
    return frozen(w, x)[1]


def run():
    w, per_device = train(3)
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
    frozen = evaluate(np.stack([w] * n), x)
    return {"w": w, "per_device": per_device, "frozen": np.asarray(frozen)}
