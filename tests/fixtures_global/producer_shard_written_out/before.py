"""flax's `shard` written out in a program: a tree_map of a lambda reshaping each leaf to
(local_device_count, -1, ...), and the TF-era form with a nested def that converts the leaf
first (flax's imagenet `prepare_tf_data`, pixelcnn's `load_and_shard_tf_batch`)."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs)


def prepare_data(xs):
    local_device_count = jax.local_device_count()

    def _prepare(x):
        # A host copy first, as `x._numpy()` does for a TF tensor.
        x = np.asarray(x)
        return x.reshape((local_device_count, -1) + x.shape[1:])

    return jax.tree_util.tree_map(_prepare, xs)


def loss_step(w, batch):
    error = batch["image"] @ w - batch["label"]
    return jax.lax.pmean(jnp.mean(error ** 2), "batch"), error


def eval_step(w, batch):
    return jax.lax.psum(jnp.sum(batch["image"] @ w), "batch")


p_loss_step = jax.pmap(loss_step, axis_name="batch")
p_eval_step = jax.pmap(eval_step, axis_name="batch")


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(1)
    w = jax.device_put_replicated(jnp.linspace(-1.0, 1.0, 3), jax.local_devices())
    losses, errors, sums = [], [], []
    for _ in range(2):
        batch = {"image": rng.normal(size=(n * 4, 3)).astype(np.float32),
                 "label": rng.normal(size=(n * 4,)).astype(np.float32)}
        loss, error = p_loss_step(w, shard(batch))
        losses.append(np.asarray(loss[0]))
        errors.append(np.asarray(error))
        sums.append(np.asarray(p_eval_step(w, prepare_data(batch))[0]))
    return {"losses": np.asarray(losses), "errors": np.asarray(errors), "sums": np.asarray(sums)}
