"""A train step that donates its state, handed with an eval step to a helper each iteration,
in the shape flax's language examples have: the steps' keys split from one key, a loop over
range, batches drawn from a numpy generator, metrics logged through a writer."""
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


class Writer:
    def __init__(self):
        self.rows = []

    def write(self, step, values):
        self.rows.append((step, values))


def train_step(params, batch, dropout_rng, learning_rate):
    dropout_rng = jax.tree.map(lambda y: jnp.squeeze(y, 0), dropout_rng)
    keep = jax.random.bernoulli(dropout_rng, 0.75, batch.shape)
    grad = jax.lax.pmean(jnp.mean(keep * batch, axis=0), "batch")
    return params - learning_rate * grad


def eval_step(params, batch):
    return jax.lax.psum(jnp.sum(batch @ params), "batch")


def evaluate(*, p_eval_step, params, batch):
    return float(p_eval_step(params, batch))


@functools.partial(jax.jit, donate_argnums=(0,))
def p_train_step(params, batch, dropout_rng):
    return jax.shard_map(
        functools.partial(train_step, learning_rate=0.1),
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=P(),
        check_vma=False,
    )(params, batch, dropout_rng)


def run(num_steps=3):
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = jax.random.PRNGKey(0)
    rng, init_rng = jax.random.split(rng)
    params = jax.device_put(
        jax.tree.map(jnp.copy, jax.random.normal(init_rng, (3,))), NamedSharding(mesh, P())
    )
    data = np.random.RandomState(0)
    writer = Writer()
    p_eval_step = jax.jit(jax.shard_map(
        eval_step,
        mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False,
    ))
    dropout_rngs = jax.random.split(rng, n)
    for step in range(num_steps):
        batch = data.normal(size=(n * 4, 3)).astype(np.float32)
        params = p_train_step(params, batch, dropout_rngs)
        writer.write(step, evaluate(p_eval_step=p_eval_step, params=params, batch=batch))
    return {"params": np.asarray(params), "errors": np.asarray([v for _, v in writer.rows])}
