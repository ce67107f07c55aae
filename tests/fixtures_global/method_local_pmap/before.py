"""A pmap built and called inside one method (bound to a local name, or a nested def decorated
with pmap), never stored on `self` nor returned, is that method's local, as a pmap in a
function is: the method is read as a caller of its own, and both sites go global."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


class Trainer:
    def __init__(self, scale):
        self.scale = scale

    def run(self, x):
        n = jax.local_device_count()

        @functools.partial(jax.pmap, axis_name="i")
        def centre(v):
            return v - jax.lax.pmean(v, "i")

        total = jax.pmap(lambda v: jax.lax.psum(v * 2.0, "i"), axis_name="i")
        xs = np.broadcast_to(x, (n,) + x.shape)
        batch = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        centred = centre(batch)
        summed = total(xs)
        return float(jnp.sum(summed[0])) * self.scale + float(jnp.sum(centred ** 2))


def run():
    trainer = Trainer(3.0)
    return {"y": trainer.run(jnp.arange(4.0))}
