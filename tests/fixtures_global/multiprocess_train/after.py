"""Multi-process training loop in the global style: each process's rows (chosen by
process_index, drawn from a per-process RNG) become one global batch; the replicated
parameters are the same on every process; process 0 logs; a psum host barrier."""
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


def _train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    first = jax.lax.psum(jnp.where(jax.lax.axis_index("batch") == 0, x[0, 0], 0.0), "batch")
    return new_params, jax.lax.pmean(loss, "batch"), first


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(params, x, y):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, x, y)


def synchronize_hosts():
    multihost_utils.sync_global_devices("synchronize_hosts")


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    key = jax.random.fold_in(jax.random.PRNGKey(0), jax.process_index())
    seed = int(jax.random.randint(key, (), 0, 1000))
    rng = np.random.RandomState(seed)
    data = np.linspace(-1.0, 1.0, 96).reshape(-1, 3)
    params = jax.device_put({"w": jnp.zeros(3), "b": jnp.zeros(())}, NamedSharding(mesh, P()))
    losses = []
    for _ in range(3):
        rows = data[jax.process_index()::jax.process_count()] + rng.normal(size=(n * 4, 3))
        x = rows.astype(np.float32).reshape(n * 4, 3)
        y = x @ np.array([0.5, -1.0, 2.0], np.float32)
        params, loss, first = train_step(
            params,
            jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x),
            jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), y),
        )
        if jax.process_index() == 0:
            losses.append(float(loss))
    synchronize_hosts()
    return {"params": jax.device_get(params),
            "losses": np.asarray(losses, np.float32), "first": np.asarray(first),
            "process": np.asarray(jax.process_index())}
