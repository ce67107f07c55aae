"""pmap of lambdas: a lambda callee assigned to a name and called later, and
`jax.pmap(lambda x: ...)(xs)` built and called on the spot.
"""
import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    xs = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    ys = np.linspace(0.0, 1.0, n * 4, dtype=np.float32).reshape(n, 4)

    # Lambda callee with an axis name, assigned and called.
    weighted_mean = jax.pmap(
        lambda x, y: jax.lax.psum(x * y, axis_name="i") / jax.lax.psum(y, axis_name="i"),
        axis_name="i",
    )
    wm = weighted_mean(xs, ys + 1.0)

    # Built and called on the spot, no axis name.
    doubled = jax.pmap(lambda x: x * 2)(xs)

    # Lambda closing over a Python value from the enclosing scope.
    offset = 3.0
    shifted = jax.pmap(lambda x: jnp.sqrt(x + offset))(xs)

    # Lambda returning a tuple, unpacked at the call site.
    lo, hi = jax.pmap(lambda x: (jnp.min(x), jnp.max(x)))(ys)

    return {
        "weighted_mean": np.asarray(wm),
        "doubled": np.asarray(doubled),
        "shifted": np.asarray(shifted),
        "lo": np.asarray(lo),
        "hi": np.asarray(hi),
    }
