"""A process-0 guard around logging (`if jax.process_index() == 0:`), common in single-process scripts, does not make the module multi-process: the step goes global as in any single-process module."""
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


def _step(w, x):
    return w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0), "batch")


@jax.jit
def step(w, x):
    return jax.shard_map(
        _step, mesh=_mesh("batch"), in_specs=(P(), P()), out_specs=P(), check_vma=False
    )(w, x)


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    w = jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))
    x = np.ones((4, 3), np.float32)
    for i in range(3):
        w = step(w, x)
        if jax.process_index() == 0:
            print("step", i)
    return {"w": np.asarray(w)}
