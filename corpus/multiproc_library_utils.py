"""Library-style multi-process utilities, in the manner of kfac-jax's `utils/parallel.py` and
acme's learners (written anew): module-level pmaps whose callers live in other modules
(`pmap_mean`, `pmap_sum`, `split_keys`), a one-device-per-process sync pmap built with
`devices=` and a static reduction, and a step compiled ahead of time from shapes
(`jax.ShapeDtypeStruct`) as well as from arrays. The module reads `jax.process_count()`, so it
is a multi-process module: with several processes each pmap takes and returns host-local rows.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

pmap_mean = jax.pmap(lambda x: jax.lax.pmean(x, "i"), axis_name="i")
pmap_sum = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
split_keys = jax.pmap(lambda key: jax.random.split(key, 3), axis_name="i")


def get_first(tree):
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[0], tree)


def process_sync(value, reduce=jax.lax.psum):
    """One device per process: the value of each process, reduced over processes."""
    devices = [jax.local_devices(process_index=p)[0] for p in range(jax.process_count())]
    sync = jax.pmap(lambda x, op: op(x, "p"), axis_name="p", devices=devices,
                    static_broadcasted_argnums=1)
    return sync(value[None], reduce)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def sgd_step(params, batch):
    grads = jax.grad(lambda p: jnp.mean((batch @ p) ** 2))(params)
    return params - 0.05 * jax.lax.pmean(grads, "batch")


def run():
    n = jax.local_device_count()
    offset = jax.process_index()
    stats = np.arange(n * 3, dtype=np.float32).reshape(n, 3) + offset
    keys = jax.random.split(jax.random.PRNGKey(7 + offset), n)
    batch = np.random.RandomState(offset).normal(size=(n, 4, 3)).astype(np.float32)
    params = np.tile(np.linspace(-1, 1, 3, dtype=np.float32), (n, 1))
    shapes = (jax.ShapeDtypeStruct(params.shape, params.dtype),
              jax.ShapeDtypeStruct(batch.shape, batch.dtype))
    from_shapes = sgd_step.lower(*shapes).compile()
    from_arrays = sgd_step.lower(params, batch).compile()
    once = from_shapes(jnp.asarray(params), batch)
    twice = from_arrays(jnp.asarray(once), batch)
    direct = sgd_step(jnp.asarray(twice), batch)
    return {
        "mean": get_first(pmap_mean(stats)),
        "sum": np.asarray(pmap_sum(stats)),
        "keys": np.asarray(split_keys(keys)),
        "processes": np.asarray(process_sync(np.float32(1.0 + offset))),
        "processes_max": np.asarray(process_sync(np.float32(1.0 + offset), jax.lax.pmax)),
        "params": np.asarray(direct),
        "count": np.asarray(jax.process_count()),
    }
