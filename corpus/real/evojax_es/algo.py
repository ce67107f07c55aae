"""Modelled on evojax's OpenES solver interface (evojax/algo/base.py, open_es.py @
acf5252475e4): `ask()` returns the population (antithetic Gaussian perturbations of the
centre), `tell(fitness)` a centred-rank gradient step with Adam, `best_params` the centre.
Single-device jitted code; written anew."""
import functools

import jax
import jax.numpy as jnp


def centered_rank(x):
    ranks = jnp.argsort(jnp.argsort(x))
    return ranks / (x.shape[0] - 1) - 0.5


@functools.partial(jax.jit, static_argnums=(2,))
def _ask(key, center, pop_size, sigma):
    key, sub = jax.random.split(key)
    half = jax.random.normal(sub, (pop_size // 2, center.shape[0]))
    noise = jnp.concatenate([half, -half])
    return key, noise, center[None, :] + sigma * noise


@jax.jit
def _tell(center, noise, fitness, m, v, t, sigma, lr):
    weights = centered_rank(fitness)
    grad = -jnp.dot(weights, noise) / (noise.shape[0] * sigma)
    t = t + 1
    m = 0.9 * m + 0.1 * grad
    v = 0.999 * v + 0.001 * grad * grad
    step = lr * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return center - step, m, v, t


class OpenES:
    def __init__(self, pop_size, param_size, init_stdev=0.1, sigma=0.1, lr=0.05, seed=0):
        self.pop_size = pop_size
        self._key = jax.random.PRNGKey(seed)
        self._key, sub = jax.random.split(self._key)
        self._center = init_stdev * jax.random.normal(sub, (param_size,))
        self._m = jnp.zeros((param_size,))
        self._v = jnp.zeros((param_size,))
        self._t = jnp.zeros((), jnp.float32)
        self._sigma, self._lr = sigma, lr
        self._noise = None

    def ask(self):
        self._key, self._noise, population = _ask(self._key, self._center, self.pop_size,
                                                  self._sigma)
        return population

    def tell(self, fitness):
        self._center, self._m, self._v, self._t = _tell(
            self._center, self._noise, fitness, self._m, self._v, self._t, self._sigma,
            self._lr)

    @property
    def best_params(self):
        return self._center
