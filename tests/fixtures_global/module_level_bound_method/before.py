"""A module-level pmap of a bound method (the Stable Diffusion notebook's
`p_generate = pmap(pipeline._generate)`), without options, only ever called with the same
number of positional arguments: its body is not read, and it names no axis, so it runs per
device as it did. `model` is bound once and `_apply` never assigned: the migrated step, which
reads `model._apply` when it is traced, gets the object pmap read once where it was built."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


class Model:
    def __init__(self, scale):
        self.scale = scale

    def _apply(self, w, x):
        return jnp.tanh(x @ w) * self.scale


model = Model(0.5)
p_apply = jax.pmap(model._apply)


def run():
    n = jax.local_device_count()
    w = jax.device_put_replicated(jnp.ones((3, 2)) * 0.1, jax.local_devices())
    x = jnp.arange(n * 4 * 3.0).reshape(n, 4, 3) / 10.0
    return {"y": np.asarray(p_apply(w, x))}
