"""flax's input path: common_utils.shard mapped over a dataset and prefetch_to_device, read in
`for step, batch in zip(range(k), it)`. flax >= 0.12.7's prefetch_to_device places each leaf
split on its leading axis, so the global batch comes out placed P(axis) (rewrite only: flax
is not installed here)."""
import functools

import jax
import jax.numpy as jnp
from flax import jax_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def _train_step(w, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch["x"] @ p - batch["y"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


@jax.jit
def train_step(w, batch):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(w, batch)


def train(w, dataset, num_steps):
    mesh = _mesh("batch")
    it = iter(dataset)
    # TODO(pmap-migrate): PM402 prefetch_to_device calls the removed device_put_sharded
    it = jax_utils.prefetch_to_device(it, 2)
    w = jax.device_put(w, NamedSharding(mesh, P()))
    for step, batch in zip(range(num_steps), it):
        w, loss = train_step(w, batch)
        print(step, float(loss))
    return w
