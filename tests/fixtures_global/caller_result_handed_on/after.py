"""A training loop whose donating step keeps it a caller of its own (a donating site is not
read inside another function), returning the trained (replicated) state and per-device keys.
`run` only returns what `main` returns, and the module's own `main()` drops it: nobody in the
module reads those values, so `main` goes global, and `run` hands out its layouts."""
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


def _train_step(w, x, key):
    key = jax.tree.map(lambda y: jnp.squeeze(y, 0), key)
    noise = jax.random.normal(key, w.shape) * 0.01
    grad = jax.lax.pmean(jnp.mean(x, axis=0) - w, "batch")
    return (
        w + 0.5 * grad + jax.lax.pmean(noise, "batch"),
        jax.tree.map(lambda y: jnp.expand_dims(y, 0), jax.random.split(key)[0]),
    )


@functools.partial(jax.jit, donate_argnums=(0,))
def train_step(w, x, key):
    return jax.shard_map(
        _train_step,
        mesh=_mesh("batch"),
        in_specs=(P(), P("batch"), P("batch")),
        out_specs=(P(), P("batch")),
        check_vma=False,
    )(w, x, key)


def main(steps=3):
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(0)
    w = jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    for _ in range(steps):
        x = rng.normal(size=(n * 2, 3)).astype(np.float32)
        w, keys = train_step(w, x.reshape(n * 2, 3), keys)
    return {"w": w, "keys": keys}


def run():
    return main()


if __name__ == "__main__":
    main()
