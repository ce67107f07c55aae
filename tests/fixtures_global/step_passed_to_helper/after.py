"""A step passed to an evaluation function by keyword, as flax's lm1b and wmt pass
`evaluate(p_eval_step=p_eval_step, params=..., ...)`: the helper's calls of the parameter are
the step's calls, read with its layouts."""
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


def train_step(w, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch["x"] @ p - batch["y"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


def eval_step(w, batch):
    return {"loss": jax.lax.pmean(jnp.mean((batch["x"] @ w - batch["y"]) ** 2), "batch"),
            "count": jax.lax.psum(jnp.float32(batch["y"].shape[0]), "batch")}


def shard(xs):
    n = jax.local_device_count()
    return jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[1:]), xs)


def evaluate(*, p_eval_step, params, batches):
    metrics = []
    for batch in batches:
        metrics.append(p_eval_step(params, batch))
    metrics = [m for m in metrics]
    return {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}


def make_batches(seed, size, count):
    rng = np.random.RandomState(seed)
    return [{"x": rng.normal(size=(size, 3)).astype(np.float32),
             "y": rng.normal(size=(size,)).astype(np.float32)} for _ in range(count)]


@jax.jit
def p_train_step(w, batch):
    return jax.shard_map(
        train_step, mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False
    )(w, batch)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    p_eval_step = jax.jit(jax.shard_map(
        eval_step,
        mesh=_mesh("batch"), in_specs=(P(), P("batch")), out_specs=P(), check_vma=False,
    ))
    losses, evals = [], []
    for batch in make_batches(0, 4 * n, 3):
        w, loss = p_train_step(w, shard(batch))
        losses.append(np.asarray(loss))
        eval_batches = [shard(b) for b in make_batches(1, 4 * n, 2)]
        summary = evaluate(p_eval_step=p_eval_step, params=w, batches=eval_batches)
        evals.append(summary["loss"])
    return {"w": np.asarray(w), "losses": np.asarray(losses), "evals": np.asarray(evals)}
