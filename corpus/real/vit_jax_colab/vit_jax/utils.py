"""Gradient accumulation and the learning-rate schedule of vit_jax/utils.py, and a momentum
optimiser standing in for `optax.chain(clip_by_global_norm, sgd(momentum=0.9))`."""
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


def accumulate_gradient(loss_and_grad_fn, params, images, labels, accum_steps):
  """Accumulate gradient over multiple steps to save on memory."""
  if accum_steps and accum_steps > 1:
    assert images.shape[0] % accum_steps == 0, (
        f'Bad accum_steps {accum_steps} for batch size {images.shape[0]}')
    step_size = images.shape[0] // accum_steps
    l, g = loss_and_grad_fn(params, images[:step_size], labels[:step_size])

    def acc_grad_and_loss(i, l_and_g):
      imgs = jax.lax.dynamic_slice(images, (i * step_size, 0, 0, 0),
                                   (step_size,) + images.shape[1:])
      lbls = jax.lax.dynamic_slice(labels, (i * step_size, 0),
                                   (step_size, labels.shape[1]))
      li, gi = loss_and_grad_fn(params, imgs, lbls)
      l, g = l_and_g
      return (l + li, jax.tree_util.tree_map(lambda x, y: x + y, g, gi))

    l, g = jax.lax.fori_loop(1, accum_steps, acc_grad_and_loss, (l, g))
    return jax.tree_util.tree_map(lambda x: x / accum_steps, (l, g))
  else:
    return loss_and_grad_fn(params, images, labels)


def create_learning_rate_schedule(total_steps, base, decay_type, warmup_steps):
  """Linear warmup, then cosine (or linear) decay to zero."""

  def step_fn(step):
    progress = jnp.clip((step - warmup_steps) / float(total_steps - warmup_steps), 0.0, 1.0)
    if decay_type == 'cosine':
      lr = base * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    else:
      lr = base * (1.0 - progress)
    if warmup_steps:
      lr = lr * jnp.minimum(1.0, step / warmup_steps)
    return jnp.asarray(lr, dtype=jnp.float32)

  return step_fn


class Optimizer(NamedTuple):
  init: Callable[[Any], Any]
  update: Callable[[Any, Any], Any]


def sgd_momentum_clipped(learning_rate, momentum, grad_norm_clip):
  """Clip by global norm, then SGD with momentum; the state counts steps for the schedule."""

  def init(params):
    return (jnp.zeros((), jnp.int32), jax.tree_util.tree_map(jnp.zeros_like, params))

  def update(grads, state):
    count, trace = state
    norm = jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree_util.tree_leaves(grads)))
    scale = jnp.minimum(1.0, grad_norm_clip / jnp.maximum(norm, 1e-6))
    trace = jax.tree_util.tree_map(lambda t, g: momentum * t + g * scale, trace, grads)
    lr = learning_rate(count)
    return jax.tree_util.tree_map(lambda t: -lr * t, trace), (count + 1, trace)

  return Optimizer(init, update)
