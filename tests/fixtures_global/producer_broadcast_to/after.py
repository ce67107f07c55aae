"""np.broadcast_to(x, (n,) + x.shape) and its tree_map form; a 0-d broadcast_to(b, (n,))."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


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
    n = jax.local_device_count()
    w = np.linspace(0.0, 1.0, 3, dtype=np.float32)
    b = jnp.zeros((), jnp.float32)
    params = {"w": np.asarray(w), "b": np.asarray(b)}
    x = np.linspace(-1.0, 1.0, n * 2 * 3, dtype=np.float32).reshape(n * 2, 3)
    y = x[..., 0] * 2.0
    params, loss = train_step(params, x, y)
    again = jax.tree.map(np.asarray, {"w": w, "b": np.float32(0.0)})
    params2, loss2 = train_step(again, x, y)
    return {"loss": np.asarray(loss), "loss2": np.asarray(loss2), "params": params}
