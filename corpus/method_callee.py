"""Bound-method callee: __init__ stores `jax.pmap(self._update, axis_name="i")` on self,
and another method calls the stored pmapped function.
"""
import jax
import jax.numpy as jnp
import numpy as np


class RunningStats:
    """Keeps a replicated running mean / variance of per-device batches."""

    def __init__(self, decay=0.9):
        self.decay = decay
        self._p_update = jax.pmap(self._update, axis_name="i")
        self._p_normalize = jax.pmap(self._normalize, axis_name="i", in_axes=(0, 0, 0))

    def _update(self, mean, var, batch):
        batch_mean = jax.lax.pmean(jnp.mean(batch, axis=0), axis_name="i")
        batch_var = jax.lax.pmean(jnp.mean((batch - batch_mean) ** 2, axis=0), axis_name="i")
        mean = self.decay * mean + (1.0 - self.decay) * batch_mean
        var = self.decay * var + (1.0 - self.decay) * batch_var
        return mean, var

    def _normalize(self, mean, var, batch):
        return (batch - mean) / jnp.sqrt(var + 1e-5)

    def init(self, n, features):
        return jnp.zeros((n, features)), jnp.ones((n, features))

    def observe(self, state, batch):
        return self._p_update(state[0], state[1], batch)

    def normalize(self, state, batch):
        return self._p_normalize(state[0], state[1], batch)


def run():
    n = jax.local_device_count()
    rng = np.random.RandomState(5)
    stats = RunningStats(decay=0.8)
    state = stats.init(n, 3)
    for _ in range(3):
        batch = (rng.normal(size=(n, 4, 3)) * 2.0 + 1.0).astype(np.float32)
        state = stats.observe(state, batch)
    normed = stats.normalize(state, batch)
    mean, var = jax.device_get(state)
    return {
        "mean": np.asarray(mean),
        "var": np.asarray(var),
        "normalized": np.asarray(normed),
    }
