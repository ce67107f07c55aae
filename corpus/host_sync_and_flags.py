"""Evaluation loop in 2024 style: a host barrier built from a pmapped psum, a check of the
`jax_pmap_shmap_merge` flag (as the JAX migration guide and kfac-jax wrote it) choosing how to
read a replicated result, and a psum over groups of devices (`axis_index_groups`)."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np

# Per-half reductions over the 8 devices this program is checked with.
HALF_GROUPS_OF_8 = 8


def _sync_hosts():
    """Wait until every device (and host) got here."""
    jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(jnp.ones(jax.local_device_count())).block_until_ready()


@functools.partial(jax.pmap, axis_name="batch")
def eval_step(params, batch):
    pred = batch["x"] @ params["w"] + params["b"]
    loss = jnp.mean((pred - batch["y"]) ** 2)
    return {"loss": jax.lax.pmean(loss, "batch"), "pred_sum": jax.lax.psum(pred.sum(), "batch")}


@functools.partial(jax.pmap, axis_name="batch")
def half_sums(x):
    return jax.lax.psum(x, "batch", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]])


def unreplicate(tree):
    """Device 0's copy of a replicated pmap output."""
    if hasattr(jax.config, "jax_pmap_shmap_merge") and jax.config.jax_pmap_shmap_merge:
        # New pmap: outputs are NamedSharding arrays; x[0] would gather, read a shard instead.
        return jax.tree_util.tree_map(lambda x: np.asarray(x.addressable_shards[0].data)[0], tree)
    else:
        return jax.tree_util.tree_map(lambda x: np.asarray(x[0]), tree)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = rng.normal(size=(4, 2)).astype(np.float32)
    b = np.zeros((2,), np.float32)
    params = {"w": np.stack([w] * n), "b": np.stack([b] * n)}
    losses = []
    for step in range(3):
        batch = {
            "x": rng.normal(size=(n, 5, 4)).astype(np.float32),
            "y": rng.normal(size=(n, 5, 2)).astype(np.float32),
        }
        metrics = unreplicate(eval_step(params, batch))
        losses.append(metrics["loss"])
        _sync_hosts()
    out = {"losses": np.stack(losses), "pred_sum": metrics["pred_sum"]}
    if n == HALF_GROUPS_OF_8:
        out["half_sums"] = np.asarray(half_sums(np.arange(n, dtype=np.float32)))
    return out
