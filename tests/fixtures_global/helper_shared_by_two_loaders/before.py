# pmap-migrate-test: original needs legacy jax
"""A script's own `shard`, called by both its train and its eval loader (the Hugging Face
Flax notebooks' shape): one rewrite serves both, since every use of it is a call the
training function's analysis follows with the same per-device batches."""
import jax
import jax.numpy as jnp
import numpy as np


def shard(xs):
    return jax.tree_util.tree_map(
        lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]), xs)


def train_loader(data, batch_size):
    for i in range(len(data) // batch_size):
        yield shard(data[i * batch_size:(i + 1) * batch_size])


def eval_loader(data, batch_size):
    for i in range(len(data) // batch_size):
        yield shard(data[i * batch_size:(i + 1) * batch_size][::-1])


def train_step(w, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return w - 0.1 * grad


def eval_step(w, x):
    return jax.lax.pmean(jnp.mean(x @ w), "batch")


p_train_step = jax.pmap(train_step, axis_name="batch")
p_eval_step = jax.pmap(eval_step, axis_name="batch")


def run():
    n = jax.local_device_count()
    data = np.arange(n * 4 * 3 * 3, dtype=np.float32).reshape(-1, 3) / 100.0
    w = jax.device_put_replicated(jnp.ones((3,)), jax.local_devices())
    for x in train_loader(data, n * 4):
        w = p_train_step(w, x)
    scores = [float(p_eval_step(w, x)[0]) for x in eval_loader(data, n * 4)]
    return {"w": np.asarray(w[0]), "scores": np.asarray(scores)}
