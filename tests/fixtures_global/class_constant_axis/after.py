"""axis_name given as a class constant (`Cfg.axis`), in the pmap call and in the body's
collective, with an inline `pmap(f, axis_name=Cfg.axis)(x)`."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import pmap
from jax.sharding import AxisType, PartitionSpec as P


class Cfg:
    axis = "replica"
    scale = 3.0


def scaled_max(x):
    return jax.lax.pmax(x, Cfg.axis) * Cfg.scale


scaled_max_sharded = jax.jit(jax.shard_map(
    scaled_max,
    in_specs=(P("replica"),), out_specs=P(), check_vma=False,
))


def run():
    mesh = jax.make_mesh((jax.device_count(),), ("replica",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        n = jax.local_device_count()
        x = np.arange(n * 2, dtype=np.float32) ** 2
        m = scaled_max_sharded(x)
        return {"scaled_max": np.asarray(m)}
