"""A pmap factory under `functools.lru_cache` (big_vision's evaluators cache theirs on the
predict function): the cache returns the same callable for the same arguments and otherwise
runs the function as written, so it hides nothing, and the factory's pmap goes global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=None)
def make_eval_fn(scale):
    def eval_fn(w, x):
        hits = jnp.sum(x @ w > scale)
        return jax.lax.psum(hits, "batch"), jax.lax.psum(jnp.float32(x.shape[0]), "batch")

    return jax.pmap(eval_fn, axis_name="batch")


def evaluate(batch_count):
    n = jax.local_device_count()
    w = jnp.stack([jnp.linspace(-1.0, 1.0, 3, dtype=jnp.float32)] * n)
    eval_fn = make_eval_fn(0.5)  # the second evaluation gets the same pmap from the cache
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0 - 1.0
    hits, seen = 0, 0
    for _ in range(batch_count):
        batch_hits, batch_seen = eval_fn(w, x)
        w = w * 0.5
        hits += int(batch_hits[0])
        seen += float(batch_seen[0])
    return hits / seen


def run():
    return {"first": np.asarray(evaluate(3)), "second": np.asarray(evaluate(2))}
