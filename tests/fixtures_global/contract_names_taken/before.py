"""PM612 in a module with functions of its own named `_per_device_shard_map` and `_pmap_mesh`:
the contract functions get free names (`_per_device_shard_map_2`, `_pmap_mesh_2`), and the
module's own functions stay, still the ones its own calls reach."""
import jax
import jax.numpy as jnp
import numpy as np


def _per_device_shard_map(x):
    """The module's own function, not the contract function."""
    return x * 10


def _pmap_mesh(x):
    return x + 1


def make_step(lr):
    def step(w, x):
        g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
        return w - lr * g
    return jax.pmap(step, axis_name="i")


def run():
    n = jax.local_device_count()
    steps = {"sgd": make_step(0.5)}  # kept as a value: pmap's contract (PM601, PM612)
    w = steps["sgd"](jnp.ones((n, 3)), jnp.arange(n * 4 * 3, dtype=jnp.float32).reshape(n, 4, 3))
    return {"w": np.asarray(w), "own": _per_device_shard_map(np.ones(2)),
            "own_mesh": _pmap_mesh(np.ones(2))}
