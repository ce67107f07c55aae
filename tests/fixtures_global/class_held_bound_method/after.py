"""A class maps its own methods (`jax.pmap(self._update, ...)`): the bodies read a plain
attribute of `self`; one result is replicated, the other per-device (merged)."""
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


class Scaler:
    def __init__(self, eps):
        self.eps = eps
        self._p_stats = jax.jit(jax.shard_map(
            self._stats,
            mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=P(), check_vma=False,
        ))
        self._p_apply = jax.jit(jax.shard_map(
            self._apply,
            mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=P("i"), check_vma=False,
        ))

    def _stats(self, total, batch):
        return total + jax.lax.psum(jnp.sum(batch, axis=0), "i")

    def _apply(self, total, batch):
        return batch / (total + self.eps)

    def zeros(self, n):
        return jax.device_put(jnp.zeros((2,)), NamedSharding(_mesh("i"), P()))

    def update(self, total, batch):
        return self._p_stats(total, batch)

    def apply(self, total, batch):
        return self._p_apply(total, batch)


def run():
    n = jax.local_device_count()
    scaler = Scaler(1e-3)
    total = scaler.zeros(n)
    batch = np.random.RandomState(1).uniform(size=(n * 3, 2)).astype(np.float32)
    total = scaler.update(total, batch)
    scaled = scaler.apply(total, batch)
    return {"total": np.asarray(total), "scaled": np.asarray(scaled)}
