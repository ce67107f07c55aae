"""A step passed to an evaluation function by keyword, as flax's lm1b and wmt pass
`evaluate(p_eval_step=p_eval_step, params=..., ...)`: the helper's calls of the parameter are
the step's calls, read with its layouts."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


def train_step(w, batch):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((batch["x"] @ p - batch["y"]) ** 2))(w)
    return w - 0.1 * jax.lax.pmean(grads, "batch"), jax.lax.pmean(loss, "batch")


def eval_step(w, batch):
    return {"loss": jax.lax.pmean(jnp.mean((batch["x"] @ w - batch["y"]) ** 2), "batch"),
            "count": jax.lax.psum(jnp.float32(batch["y"].shape[0]), "batch")}


def shard(xs):
    n = jax.local_device_count()
    return jax.tree_util.tree_map(lambda x: x.reshape((n, -1) + x.shape[1:]), xs)


def evaluate(*, p_eval_step, params, batches):
    metrics = []
    for batch in batches:
        metrics.append(p_eval_step(params, batch))
    metrics = [jax.tree_util.tree_map(lambda x: x[0], m) for m in metrics]
    return {k: float(np.mean([m[k] for m in metrics])) for k in metrics[0]}


def make_batches(seed, size, count):
    rng = np.random.RandomState(seed)
    return [{"x": rng.normal(size=(size, 3)).astype(np.float32),
             "y": rng.normal(size=(size,)).astype(np.float32)} for _ in range(count)]


def run():
    n = jax.local_device_count()
    w = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices())
    p_train_step = jax.pmap(train_step, axis_name="batch")
    p_eval_step = jax.pmap(eval_step, axis_name="batch")
    losses, evals = [], []
    for batch in make_batches(0, 4 * n, 3):
        w, loss = p_train_step(w, shard(batch))
        losses.append(np.asarray(loss[0]))
        eval_batches = [shard(b) for b in make_batches(1, 4 * n, 2)]
        summary = evaluate(p_eval_step=p_eval_step, params=w, batches=eval_batches)
        evals.append(summary["loss"])
    return {"w": np.asarray(w[0]), "losses": np.asarray(losses), "evals": np.asarray(evals)}
