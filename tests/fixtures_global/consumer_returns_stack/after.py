"""The entry returns the replicated stack and a list of per-step stacks: the layout map records both."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.partial(jax.jit, donate_argnums=(0,))
@functools.partial(jax.shard_map, in_specs=(P(), P(), P()), out_specs=P(), check_vma=False)
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        params = {"w": jax.device_put(jnp.ones(3), P()), "b": jax.device_put(jnp.zeros(()), P())}
        x = np.ones((2, 3), np.float32)
        y = np.zeros((2,), np.float32)
        losses = []
        for _ in range(2):
            params, loss = train_step(params, x, y)
            losses.append(np.asarray(loss))
        return {"params": jax.device_get(params), "losses": np.stack(losses)}
