"""The stacked params' shape is read after the step, and that would change once the device axis
is gone (PM605 before results were read one by one): the step returns a tuple, so that result
alone comes back in pmap's stacked layout (n equal rows, out_specs P(axis)) and the loss is
replicated (P())."""
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
    return jax.tree.map(lambda y: jnp.expand_dims(y, 0), new_params), jax.lax.pmean(loss, "batch")


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P(), P()),
        out_specs=(P("batch"), P()),
        check_vma=False,
    )(params, x, y)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    params = {
        "w": jax.device_put(jnp.ones(3), NamedSharding(mesh, P())),
        "b": jax.device_put(jnp.zeros(()), NamedSharding(mesh, P())),
    }
    params, loss = train_step(params, np.ones((2, 3), np.float32), np.zeros((2,), np.float32))
    return {"loss": np.asarray(loss), "shape": np.asarray(params["w"].shape)}
