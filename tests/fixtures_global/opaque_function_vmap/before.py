"""PM600 for a pmap of a function whose body is not read (`jnp.dot`, a bound method, a local
name): called where it is built, with no options (so it names no axis and uses no
collective), it runs as `jax.vmap(f)` over each device's (1, ...) block of stacked rows, or on
replicated values as they are (out_specs P(): every device computes the same). Given a batch,
it sees one device's row under pmap, so the batch keeps pmap's stacked layout (its reshape is
left as written, PM611) and the function runs as jax.vmap over each device's block."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


class Sampler:
    def __init__(self, shape):
        self.shape = shape

    def draw(self, key):
        return {"x": jax.random.normal(key, self.shape), "key": key}


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    sampler = Sampler((3, 3))
    drawn = jax.pmap(sampler.draw)(keys)
    grams = jax.pmap(jnp.dot)(drawn["x"], drawn["x"])
    means = jax.pmap(jnp.mean)(grams)
    w = jax.device_put_replicated(jnp.arange(4.0), jax.local_devices())
    total = jax.pmap(jnp.sum)(w)
    return {"x": np.asarray(drawn["x"]), "means": np.asarray(means), "total": np.asarray(total)}


def batch_max():
    n = jax.local_device_count()
    batch = np.arange(n * 4.0).reshape(n, 4)
    return {"max": np.asarray(jax.pmap(jnp.max)(batch))}
