"""A pmap built and called inside one method (bound to a local name, or a nested def decorated
with pmap), never stored on `self` nor returned, is that method's local, as a pmap in a
function is: the method is read as a caller of its own, and both sites go global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


class Trainer:
    def __init__(self, scale):
        self.scale = scale

    def run(self, x):
        n = jax.local_device_count()

        def _centre(v):
            return v - jax.lax.pmean(v, "i")

        @jax.jit
        def centre(v):
            return jax.shard_map(
                _centre, mesh=_mesh("i"), in_specs=(P("i"),), out_specs=P("i"), check_vma=False
            )(v)

        total = jax.jit(jax.shard_map(
            lambda v: jax.lax.psum(v * 2.0, "i"),
            mesh=_mesh("i"), in_specs=(P(),), out_specs=P(), check_vma=False,
        ))
        xs = x
        batch = np.arange(n * 4, dtype=np.float32)
        centred = centre(batch)
        summed = total(xs)
        return float(jnp.sum(summed)) * self.scale + float(jnp.sum(centred ** 2))


def run():
    trainer = Trainer(3.0)
    return {"y": trainer.run(jnp.arange(4.0))}
