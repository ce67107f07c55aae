"""Modelled on flax's ImageNet example training loop (examples/imagenet/train.py) from the
time it kept the train state replicated on every device.

Source: github.com/google/flax, examples/imagenet/train.py at commit
e60035116e9976af855b81400c63718844b3b725 (2024-08-12, the last version before the loop
moved to `in_axes=(None, 0)`), with the helpers it uses from the same commit:
flax/jax_utils.py (`replicate`, `unreplicate`, `prefetch_to_device`) and
flax/training/common_utils.py (`shard`, `get_metrics`). flax, optax, tfds and clu are not
used: the helpers are rewritten here with the same semantics (replicate =
`jax.device_put_replicated` onto `jax.local_devices()`; shard = reshape to
(local_device_count, -1, ...); unreplicate = `tree_map(lambda x: x[0])`; prefetch =
`jax.device_put_sharded` of each batch into a deque of 2), the model is a two-layer MLP with
a batch-norm-style running mean/variance in plain jax.numpy, and the optimiser is a
hand-written Nesterov SGD. All code here is written anew.

pmap features kept:
- `jax.pmap(functools.partial(train_step, learning_rate_fn=lr_fn), axis_name="batch")`
  and `jax.pmap(eval_step, axis_name="batch")` built inside `train_and_evaluate`;
- in the step: `lax.pmean` of the grads, of the running statistics, and of the metrics
  dict (in a helper called by both steps); the learning rate read from the replicated
  step counter through the schedule closure;
- a module-level `cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")` used to
  sync the running statistics before each evaluation and before the "checkpoint";
- the state (a NamedTuple with a Python-int step, params, stats, momentum) replicated by
  `replicate`; batches `shard`ed on the host and placed by `prefetch_to_device`;
- host reads: `get_metrics` (`x[0]` of each metric, `jax.device_get`, `np.stack`), the
  checkpoint's `device_get(tree_map(lambda x: x[0], state))`, `unreplicate` of the final
  state.

Scaled down: 16-feature synthetic data in 10 classes (seeded numpy), global batch 8 per
device, 3 epochs of 4 steps, 2 eval batches per epoch, logging every 4 steps. No
tensorboard, checkpoint files or profiler: the checkpoint keeps the host copy in memory.

The original needs jax 0.4.38: `jax.device_put_replicated` and `jax.device_put_sharded`
are gone from jax 0.10 (the migrated program is what runs there).
"""
import collections
import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

NUM_CLASSES = 10
FEATURES = 16
HIDDEN = 32


def _pmap_device_order():
    return jax.local_devices()


def replicate(tree, devices=None):
    devices = devices or _pmap_device_order()
    return jax.device_put_replicated(tree, devices)


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs
    )


def prefetch_to_device(iterator, size, devices=None):
    pending = collections.deque()
    devices = _pmap_device_order() if devices is None else devices

    def place(x):
        return jax.device_put_sharded(list(x), devices)

    def top_up(count):
        for item in itertools.islice(iterator, count):
            pending.append(jax.tree_util.tree_map(place, item))

    top_up(size)
    while pending:
        yield pending.popleft()
        top_up(1)


def stack_forest(forest):
    return jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *forest)


def get_metrics(device_metrics):
    first = jax.tree_util.tree_map(lambda x: x[0], device_metrics)
    return stack_forest(jax.device_get(first))


class TrainState(NamedTuple):
    step: Any
    params: Any
    batch_stats: Any
    momentum: Any


def init_model(key):
    k1, k2 = jax.random.split(key)
    params = {
        "hidden": {"w": jax.random.normal(k1, (FEATURES, HIDDEN)) / math.sqrt(FEATURES),
                   "b": jnp.zeros((HIDDEN,))},
        "norm": {"scale": jnp.ones((HIDDEN,)), "bias": jnp.zeros((HIDDEN,))},
        "head": {"w": jax.random.normal(k2, (HIDDEN, NUM_CLASSES)) / math.sqrt(HIDDEN),
                 "b": jnp.zeros((NUM_CLASSES,))},
    }
    batch_stats = {"mean": jnp.zeros((HIDDEN,)), "var": jnp.ones((HIDDEN,))}
    return params, batch_stats


def apply_model(params, batch_stats, x, train):
    h = x @ params["hidden"]["w"] + params["hidden"]["b"]
    if train:
        mean = h.mean(0)
        var = h.var(0)
        new_stats = {"mean": 0.9 * batch_stats["mean"] + 0.1 * mean,
                     "var": 0.9 * batch_stats["var"] + 0.1 * var}
    else:
        mean, var = batch_stats["mean"], batch_stats["var"]
        new_stats = batch_stats
    h = (h - mean) * lax.rsqrt(var + 1e-5) * params["norm"]["scale"] + params["norm"]["bias"]
    h = jax.nn.relu(h)
    return h @ params["head"]["w"] + params["head"]["b"], new_stats


def cross_entropy(logits, labels):
    one_hot = jax.nn.one_hot(labels, NUM_CLASSES)
    return -jnp.mean(jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1))


def compute_metrics(logits, labels):
    metrics = {
        "loss": cross_entropy(logits, labels),
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == labels),
    }
    return lax.pmean(metrics, axis_name="batch")


def make_lr_schedule(base_lr, warmup_steps, total_steps):
    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm = base_lr * step / max(warmup_steps, 1)
        progress = jnp.clip((step - warmup_steps) / max(total_steps - warmup_steps, 1), 0.0, 1.0)
        cosine = base_lr * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        return jnp.where(step < warmup_steps, warm, cosine)

    return schedule


def train_step(state, batch, learning_rate_fn):
    def loss_fn(params):
        logits, new_stats = apply_model(params, state.batch_stats, batch["image"], train=True)
        loss = cross_entropy(logits, batch["label"])
        l2 = sum(jnp.sum(p ** 2) for p in jax.tree_util.tree_leaves(params) if p.ndim > 1)
        return loss + 1e-4 * 0.5 * l2, (new_stats, logits)

    lr = learning_rate_fn(state.step)
    (_, (new_stats, logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    grads = lax.pmean(grads, axis_name="batch")
    metrics = compute_metrics(logits, batch["label"])
    metrics["learning_rate"] = lr

    momentum = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, state.momentum, grads)
    params = jax.tree_util.tree_map(
        lambda p, m, g: p - lr * (g + 0.9 * m), state.params, momentum, grads)
    new_state = TrainState(
        step=state.step + 1,
        params=params,
        batch_stats=lax.pmean(new_stats, "batch"),
        momentum=momentum,
    )
    return new_state, metrics


def eval_step(state, batch):
    logits, _ = apply_model(state.params, state.batch_stats, batch["image"], train=False)
    return compute_metrics(logits, batch["label"])


cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")


def sync_batch_stats(state):
    return state._replace(batch_stats=cross_replica_mean(state.batch_stats))


def synthetic_batches(seed, batch_size, centres):
    rng = np.random.RandomState(seed)
    while True:
        labels = rng.randint(0, NUM_CLASSES, size=batch_size)
        images = centres[labels] + rng.normal(size=(batch_size, FEATURES))
        yield {"image": images.astype(np.float32), "label": labels.astype(np.int32)}


def create_input_iter(seed, batch_size, centres, prefetch):
    it = map(shard, synthetic_batches(seed, batch_size, centres))
    if prefetch:
        it = prefetch_to_device(it, 2)
    return it


def save_checkpoint(state, store):
    host_state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
    store[int(host_state.step)] = host_state


def train_and_evaluate(config):
    n = jax.local_device_count()
    batch_size = config["per_device_batch"] * n
    centres = np.random.RandomState(0).normal(scale=2.0, size=(NUM_CLASSES, FEATURES))
    train_iter = create_input_iter(1, batch_size, centres, prefetch=True)
    eval_iter = create_input_iter(2, batch_size, centres, prefetch=False)

    steps_per_epoch = config["steps_per_epoch"]
    num_steps = steps_per_epoch * config["num_epochs"]
    learning_rate_fn = make_lr_schedule(config["learning_rate"], steps_per_epoch, num_steps)

    params, batch_stats = init_model(jax.random.PRNGKey(0))
    state = TrainState(
        step=0,
        params=params,
        batch_stats=batch_stats,
        momentum=jax.tree_util.tree_map(jnp.zeros_like, params),
    )
    step_offset = int(state.step)
    state = replicate(state)

    p_train_step = jax.pmap(
        functools.partial(train_step, learning_rate_fn=learning_rate_fn),
        axis_name="batch",
    )
    p_eval_step = jax.pmap(eval_step, axis_name="batch")

    history = {"train_loss": [], "train_accuracy": [], "learning_rate": [],
               "eval_loss": [], "eval_accuracy": []}
    checkpoints = {}
    train_metrics = []
    for step, batch in zip(range(step_offset, num_steps), train_iter):
        state, metrics = p_train_step(state, batch)
        train_metrics.append(metrics)
        if (step + 1) % config["log_every_steps"] == 0:
            stacked = get_metrics(train_metrics)
            summary = jax.tree_util.tree_map(lambda x: x.mean(), stacked)
            history["train_loss"].append(summary["loss"])
            history["train_accuracy"].append(summary["accuracy"])
            history["learning_rate"].append(summary["learning_rate"])
            train_metrics = []

        if (step + 1) % steps_per_epoch == 0:
            eval_metrics = []
            state = sync_batch_stats(state)
            for _ in range(config["steps_per_eval"]):
                eval_batch = next(eval_iter)
                eval_metrics.append(p_eval_step(state, eval_batch))
            summary = jax.tree_util.tree_map(lambda x: x.mean(), get_metrics(eval_metrics))
            history["eval_loss"].append(summary["loss"])
            history["eval_accuracy"].append(summary["accuracy"])
        if step + 1 == num_steps:
            state = sync_batch_stats(state)
            save_checkpoint(state, checkpoints)

    return state, history, checkpoints


def run():
    config = {
        "per_device_batch": 8,
        "steps_per_epoch": 4,
        "num_epochs": 3,
        "steps_per_eval": 2,
        "log_every_steps": 4,
        "learning_rate": 0.1,
    }
    state, history, checkpoints = train_and_evaluate(config)
    final = unreplicate(state)
    saved_step = max(checkpoints)
    out = {k: np.asarray(v) for k, v in history.items()}
    out["final_step"] = np.asarray(final.step)
    out["saved_step"] = np.asarray(saved_step)
    out["head_w"] = np.asarray(final.params["head"]["w"])
    out["hidden_w"] = np.asarray(final.params["hidden"]["w"])
    out["running_mean"] = np.asarray(final.batch_stats["mean"])
    out["saved_running_var"] = np.asarray(checkpoints[saved_step].batch_stats["var"])
    return out
