"""A tiny patch-embedding classifier standing in for vit_jax/models.py's VisionTransformer,
with a Flax-like `init` / `apply(variables, inputs, train=..., rngs=...)`."""
import jax
import jax.numpy as jnp


class TinyVisionTransformer:

  def __init__(self, num_classes, patch=2, hidden=8, dropout_rate=0.1):
    self.num_classes, self.patch, self.hidden = num_classes, patch, hidden
    self.dropout_rate = dropout_rate

  def _patches(self, inputs):
    n, h, w, c = inputs.shape
    p = self.patch
    x = inputs.reshape(n, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, (h // p) * (w // p), p * p * c)

  def init(self, rng, inputs, train=False):
    k1, k2 = jax.random.split(rng)
    width = self._patches(inputs).shape[-1]
    return {'params': {
        'embedding': {'kernel': 0.2 * jax.random.normal(k1, (width, self.hidden))},
        'head': {'kernel': jnp.zeros((self.hidden, self.num_classes)),
                 'bias': jnp.zeros((self.num_classes,))},
        'pre_logits': {'kernel': 0.2 * jax.random.normal(k2, (self.hidden, self.hidden))},
    }}

  def apply(self, variables, inputs, train=False, rngs=None):
    params = variables['params']
    x = jnp.tanh(self._patches(inputs) @ params['embedding']['kernel']).mean(axis=1)
    x = jnp.tanh(x @ params['pre_logits']['kernel'])
    if train:
      keep = jax.random.bernoulli(rngs['dropout'], 1.0 - self.dropout_rate, x.shape)
      x = jnp.where(keep, x / (1.0 - self.dropout_rate), 0.0)
    return x @ params['head']['kernel'] + params['head']['bias']
