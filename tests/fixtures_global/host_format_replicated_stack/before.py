"""A replicated stack formatted into a string (`f"{stats}"`): pmap's n equal rows are its text.
The migrated value is one row, so the field formats it repeated back to n rows, leaf by leaf
(a jax Array stays one, a host array numpy): the same text, and the step goes global."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np

step = jax.pmap(lambda p, x: ({"w": p * 2.0, "n": jax.lax.psum(jnp.sum(x), "b")}, p + 1.0),
                axis_name="b")


def run():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.arange(3.0), jax.local_devices())
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    stats, params = step(params, x)
    text = f"stats {stats} params {params!s}"
    host = jax.device_get(stats)
    text += f" host {host}"
    return {"text": np.frombuffer(text.encode(), dtype=np.uint8), "params": np.asarray(params[0])}
