"""Per-device results with a leading axis come back merged (P(axis)) and feed the next step; a per-device scalar result keeps pmap's stacked layout."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@jax.shard_map(in_specs=(P("devices"), P()), out_specs=P("devices"), check_vma=False)
def activate(x, w):
    return jnp.tanh(x @ w)


@jax.jit
@jax.shard_map(in_specs=(P("devices"), P("devices")), out_specs=P("devices"), check_vma=False)
def shift(h, bias):
    return h + bias, jnp.zeros_like(h)


@jax.jit
@jax.shard_map(in_specs=(P("devices"),), out_specs=P("devices"), check_vma=False)
def per_device_max(h):
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), jnp.max(h))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("devices",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.linspace(-1.0, 1.0, n * 3 * 2, dtype=np.float32).reshape(n * 3, 2)
        w = np.eye(2, dtype=np.float32)
        h = activate(x, w)
        shifted, zeros = shift(h, jnp.ones_like(h))
        return {
            "h": np.asarray(h),
            "shifted": np.asarray(shifted),
            "zeros": np.asarray(zeros),
            "max": np.asarray(per_device_max(shifted)),
        }
