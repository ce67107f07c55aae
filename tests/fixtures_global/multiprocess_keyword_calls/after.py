"""Multi-process flax-style step: built in the training function over functools.partial,
called with each device's dropout key by keyword; each process draws its own rows (by
process_index) and its own keys (folded with process_index), the parameters are the same on
every process."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def train_step(params, x, y, scale, dropout_rng=None):
    dropout_rng = jax.tree.map(lambda y: jnp.squeeze(y, 0), dropout_rng)
    keep = jax.random.bernoulli(dropout_rng, 0.75, y.shape)
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(keep * (x @ p - y) ** 2) * scale)(params)
    grads = jax.lax.pmean(grads, "batch")
    return params - 0.1 * grads, jax.lax.pmean(loss, "batch")


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(7 + jax.process_index())
    key = jax.random.fold_in(jax.random.PRNGKey(0), jax.process_index())
    scale = 2.0
    params = jax.device_put(jnp.zeros((3,)), NamedSharding(mesh, P()))

    @functools.partial(jax.jit, donate_argnums=(0,))
    def p_train_step(params, x, y, dropout_rng):
        return jax.shard_map(
            lambda params, x, y, dropout_rng: train_step(
                params, x, y, scale=scale, dropout_rng=dropout_rng
            ),
            mesh=_mesh("batch"),
            in_specs=(P(), P("batch"), P("batch"), P("batch")),
            out_specs=P(),
            check_vma=False,
        )(params, x, y, dropout_rng)

    losses = []
    for _ in range(3):
        key, step_key = jax.random.split(key)
        dropout_rngs = jax.random.split(step_key, n)
        x = rng.normal(size=(n * 4, 3)).astype(np.float32)
        y = x @ np.array([0.5, -1.0, 2.0], np.float32)
        params, loss = p_train_step(
            params,
            jax.make_array_from_process_local_data(
                NamedSharding(mesh, P("batch")),
                x.reshape(n * 4, 3),
            ),
            jax.make_array_from_process_local_data(
                NamedSharding(mesh, P("batch")),
                y.reshape(n * 4),
            ),
            dropout_rng=multihost_utils.host_local_array_to_global_array(
                dropout_rngs,
                mesh,
                P("batch"),
            ),
        )
        losses.append(np.asarray(loss))
    return {"params": np.asarray(params), "losses": np.asarray(losses),
            "process": np.asarray(jax.process_index())}
