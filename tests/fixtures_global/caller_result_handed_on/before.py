"""A training loop whose donating step keeps it a caller of its own (a donating site is not
read inside another function), returning the trained (replicated) state and per-device keys.
`run` only returns what `main` returns, and the module's own `main()` drops it: nobody in the
module reads those values, so `main` goes global, and `run` hands out its layouts."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(w, x, key):
    noise = jax.random.normal(key, w.shape) * 0.01
    grad = jax.lax.pmean(jnp.mean(x, axis=0) - w, "batch")
    return w + 0.5 * grad + jax.lax.pmean(noise, "batch"), jax.random.split(key)[0]


def main(steps=3):
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jax.device_put_replicated(jnp.zeros(3), jax.local_devices())
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    for _ in range(steps):
        x = rng.normal(size=(n * 2, 3)).astype(np.float32)
        w, keys = train_step(w, x.reshape(n, 2, 3), keys)
    return {"w": w, "keys": keys}


def run():
    return main()


if __name__ == "__main__":
    main()
