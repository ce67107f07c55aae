"""flax's shard_prng_key: one dropout key per device, as flax's pixelcnn passes it to its
train step; the keys keep pmap's stacked layout (rewrite only: flax is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax.training import common_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(params, batch, dropout_rng):
    dropout_rng = jax.tree.map(lambda y: jnp.squeeze(y, 0), dropout_rng)
    keep = jax.random.bernoulli(dropout_rng, 0.9, batch.shape[:1])
    loss = jnp.mean(jnp.where(keep, batch @ params, 0.0) ** 2)
    grads = jax.lax.pmean(jax.grad(lambda p: jnp.mean((batch @ p) ** 2))(params), "batch")
    return params - 0.1 * grads, jax.lax.pmean(loss, "batch")


@jax.jit
def train_step(params, batch, dropout_rng):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, batch, dropout_rng)


def train(params, batches, rng):
    mesh = _mesh("batch")
    params = jax.device_put(params, NamedSharding(mesh, P()))
    for batch in batches:
        rng, step_rng = jax.random.split(rng)
        params, loss = train_step(params, jax.device_put(batch, NamedSharding(mesh, P("batch"))),
                                  common_utils.shard_prng_key(step_rng))
        print(float(loss))
    return params
