"""`.lower(...).compile()` of a step: the compiled program is called as the step is, on a list
of batches a comprehension builds (indexed, iterated, starred into the call), and
`.lower(...).compile()(...)` on the spot; the step donates its parameters."""
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


def shard(x):
    return x.reshape((-1,) + x.shape[1:])


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    x = rng.normal(size=(8 * n, 3)).astype(np.float32)
    y = x @ np.array([0.5, -1.0, 2.0], np.float32)
    params = jax.device_put({"w": jnp.zeros(3), "b": jnp.zeros(())}, NamedSharding(mesh, P()))
    batches = [(shard(x[i::4]), shard(y[i::4])) for i in range(4)]
    compiled = train_step.lower(params, *batches[0]).compile()
    losses = []
    for batch in batches:
        params, loss = compiled(params, *batch)
        losses.append(loss)
    first = [shard(a[:2 * n]) for a in (x, y)]
    params, loss = train_step.lower(params, *first).compile()(params, *first)
    return {"params": jax.device_get(params),
            "losses": np.asarray(losses), "last": np.asarray(loss)}
