"""Modelled on dm-haiku's ImageNet example training script (examples/imagenet/train.py).

Source: github.com/google-deepmind/dm-haiku, examples/imagenet/train.py at commit
d915ddfe44f97fac626399be3cdf2e2aed8cec2c (2024-10-17). haiku, optax, jmp and the dataset
module are not used: the network is a two-layer MLP with a running-mean "state" in plain
jax.numpy, the optimiser a hand-written Nesterov momentum with a step-count schedule, the
loss scale a fixed power of two, and the data seeded numpy. All code here is written anew.

pmap features kept:
- a module-level `@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))` train
  step taking a 4-field NamedTuple train state (params, model state, optimiser state, loss
  scale) and a per-device batch; `jax.lax.pmean` of the grads and of a scalars dict; the
  loop feeds the returned state back in (the donated one is deleted);
- initialisation by an inline `jax.pmap(initial_state)(rng, batch)`: the same PRNG key on
  every device through `jnp.broadcast_to(rng, (local_device_count,) + rng.shape)`, and the
  first training batch as the example input;
- batches laid out as (local_device_count, per_device_batch, ...) by the input pipeline;
- evaluation without pmap: `jax.tree.map(lambda x: x[0], (params, state))` then a
  `jax.jit` eval step over host batches, accumulating the correct count on device;
- logging through `jax.tree.map(lambda v: np.mean(v).item(), jax.device_get(scalars))`.

Scaled down: 16-feature synthetic data in 10 classes, 8 examples per device, 10 steps,
log every 3 and eval every 5 steps, 64 eval examples in batches of 16; no profiler or timers.
"""
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NUM_CLASSES = 10
FEATURES = 16
HIDDEN = 24
LOSS_SCALE = 2.0 ** 7
BASE_LR = 0.1
TOTAL_STEPS = 10


class TrainState(NamedTuple):
    params: Any
    state: Any
    opt_state: Any
    loss_scale: Any


def forward_apply(params, state, images, is_training):
    h = images @ params["w1"] + params["b1"]
    if is_training:
        centre = h.mean(0)
        new_state = {"avg": 0.99 * state["avg"] + 0.01 * centre, "count": state["count"] + 1}
    else:
        centre = state["avg"]
        new_state = state
    h = jax.nn.gelu(h - centre)
    return h @ params["w2"] + params["b2"], new_state


def forward_init(rng, images):
    k1, k2 = jax.random.split(rng)
    params = {
        "w1": jax.random.truncated_normal(k1, -2.0, 2.0, (FEATURES, HIDDEN)) / math.sqrt(FEATURES),
        "b1": jnp.zeros((HIDDEN,)),
        "w2": jax.random.truncated_normal(k2, -2.0, 2.0, (HIDDEN, NUM_CLASSES)) / math.sqrt(HIDDEN),
        "b2": jnp.zeros((NUM_CLASSES,)),
    }
    state = {"avg": jnp.zeros((HIDDEN,)), "count": jnp.zeros((), jnp.int32)}
    del images
    return params, state


def lr_schedule(step):
    frac = jnp.minimum(step.astype(jnp.float32) / TOTAL_STEPS, 1.0)
    return BASE_LR * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))


def optimizer_init(params):
    return {"count": jnp.zeros((), jnp.int32),
            "trace": jax.tree.map(jnp.zeros_like, params)}


def optimizer_update(grads, opt_state):
    trace = jax.tree.map(lambda t, g: 0.9 * t + g, opt_state["trace"], grads)
    lr = lr_schedule(opt_state["count"])
    updates = jax.tree.map(lambda t, g: -lr * (g + 0.9 * t), trace, grads)
    return updates, {"count": opt_state["count"] + 1, "trace": trace}


def l2_loss(params):
    return 0.5 * sum(jnp.sum(jnp.square(p)) for p in params)


def loss_fn(params, state, loss_scale, batch):
    logits, state = forward_apply(params, state, batch["images"], is_training=True)
    labels = jax.nn.one_hot(batch["labels"], NUM_CLASSES)
    labels = labels * 0.9 + 0.1 / NUM_CLASSES
    loss = -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))
    loss = loss + 1e-4 * l2_loss([params["w1"], params["w2"]])
    return loss * loss_scale, (loss, state)


@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
def train_step(train_state, batch):
    params, state, opt_state, loss_scale = train_state
    grads, (loss, new_state) = jax.grad(loss_fn, has_aux=True)(params, state, loss_scale, batch)
    grads = jax.tree.map(lambda g: g / loss_scale, grads)
    grads = jax.lax.pmean(grads, axis_name="i")
    updates, new_opt_state = optimizer_update(grads, opt_state)
    new_params = jax.tree.map(lambda p, u: p + u, params, updates)
    scalars = {"train_loss": loss, "loss_scale": loss_scale}
    scalars = jax.lax.pmean(scalars, axis_name="i")
    return TrainState(new_params, new_state, new_opt_state, loss_scale), scalars


def initial_state(rng, batch):
    params, state = forward_init(rng, batch["images"])
    opt_state = optimizer_init(params)
    return TrainState(params, state, opt_state, jnp.asarray(LOSS_SCALE, jnp.float32))


@jax.jit
def eval_batch(params, state, batch):
    logits, _ = forward_apply(params, state, batch["images"], is_training=False)
    predicted = jnp.argmax(logits, axis=-1)
    return jnp.sum(jnp.equal(predicted, batch["labels"])).astype(jnp.float32)


def load_dataset(seed, batch_dims, centres, num_batches=None):
    rng = np.random.RandomState(seed)
    produced = 0
    while num_batches is None or produced < num_batches:
        size = int(np.prod(batch_dims))
        labels = rng.randint(0, NUM_CLASSES, size=size)
        images = centres[labels] + rng.normal(size=(size, FEATURES))
        yield {"images": images.astype(np.float32).reshape(tuple(batch_dims) + (FEATURES,)),
               "labels": labels.astype(np.int32).reshape(tuple(batch_dims))}
        produced += 1


def evaluate(params, state, centres, num_examples=64, batch_size=16):
    params, state = jax.tree.map(lambda x: x[0], (params, state))
    correct = jnp.array(0.0)
    total = 0
    for batch in load_dataset(7, [batch_size], centres, num_examples // batch_size):
        correct += eval_batch(params, state, batch)
        total += batch["labels"].shape[0]
    return {"top_1_acc": correct.item() / total}


def run():
    local_device_count = jax.local_device_count()
    centres = np.random.RandomState(3).normal(scale=2.0, size=(NUM_CLASSES, FEATURES))
    train_dataset = load_dataset(5, [local_device_count, 8], centres)

    rng = jax.random.PRNGKey(42)
    rng = jnp.broadcast_to(rng, (local_device_count,) + rng.shape)
    batch = next(train_dataset)
    train_state = jax.pmap(initial_state)(rng, batch)

    eval_every = 5
    log_every = 3
    logged, evals = [], []
    for step_num in range(TOTAL_STEPS):
        batch = next(train_dataset)
        train_state, train_scalars = train_step(train_state, batch)
        if eval_every > 0 and step_num and step_num % eval_every == 0:
            evals.append(evaluate(train_state.params, train_state.state, centres)["top_1_acc"])
        if step_num and step_num % log_every == 0:
            train_scalars = jax.tree.map(lambda v: np.mean(v).item(), jax.device_get(train_scalars))
            logged.append(train_scalars["train_loss"])
    evals.append(evaluate(train_state.params, train_state.state, centres)["top_1_acc"])

    host_params = jax.device_get(jax.tree.map(lambda x: x[0], train_state.params))
    return {
        "logged_loss": np.asarray(logged),
        "eval_top1": np.asarray(evals),
        "w2": np.asarray(host_params["w2"]),
        "b2": np.asarray(host_params["b2"]),
        "state_avg": np.asarray(train_state.state["avg"]),
        "state_count": np.asarray(train_state.state["count"]),
        "opt_count": np.asarray(train_state.opt_state["count"][0]),
        "last_scalars_loss": np.asarray(train_scalars["train_loss"]),
    }
