"""A replicated tuple literal and a list result are sequences: `p[1]` and `out[0]` pick an element, not a device's row."""
# pmap-migrate-test: original needs legacy jax
import functools
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@jax.jit
@functools.partial(jax.shard_map, in_specs=(P(), P("i")), out_specs=P(), check_vma=False)
def step(p, x):
    return [p[0] + jax.lax.psum(jnp.sum(x), "i"), p[1]]


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        p = jax.device_put((jnp.arange(3.0), jnp.ones(2)), P())
        x = np.arange(n * 2, dtype=np.float32)
        out = step(p, x)
        return {"a": np.asarray(out[0]), "b": np.asarray(p[1])}
