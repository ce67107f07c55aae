"""A pmap built in a function that never calls it (kept for later, or left over from an edit):
with no call there is no layout to give it, so it keeps pmap's calling contract with a finding
that says so, and the function's other site still goes global. It was an internal error
(a KeyError in the site's usage)."""
import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    p_eval = jax.pmap(lambda x: x * 2.0, axis_name="batch")  # never called
    p_sum = jax.pmap(lambda x: jax.lax.psum(x, "batch"), axis_name="batch")
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    total = p_sum(x)
    return {"total": np.asarray(total[0])}
