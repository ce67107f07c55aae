"""Modelled on Hugging Face transformers' Flax causal-language-modelling example
(examples/flax/language-modeling/run_clm_flax.py).

Source: github.com/huggingface/transformers, examples/flax/language-modeling/run_clm_flax.py
at commit 00e12e7c54598e50e7bef1540db3408f81916de1, with the flax helpers it imports
(`jax_utils.replicate` / `unreplicate`, `common_utils.shard` / `get_metrics` / `onehot`,
`training.common_utils.shard_prng_key`). transformers, datasets, flax and optax are not
used: the model is a one-block causal language model in plain jax.numpy (embedding,
causal mean-pooling mixer, dropout, tied output), the optimiser a hand-written AdamW under a
linear warmup / linear decay schedule, and the dataset seeded numpy token blocks. All code
here is written anew.

pmap features kept:
- `train_step` and `eval_step` are defs nested inside `main()`, closing over the schedule
  function and the model; `p_train_step = jax.pmap(train_step, "batch",
  donate_argnums=(0,))` (axis name passed positionally) and `p_eval_step =
  jax.pmap(eval_step, "batch")`;
- in the steps: `batch.pop("labels")` inside the mapped function (inside the loss closure
  for the train step), `lax.pmean` of the grads and of the metrics dict;
- the train state is a pytree dataclass (static optimiser) with a `replicate()` method: `replicate` of every field
  (`jax.device_put_replicated` onto the local devices, as flax's `jax_utils.replicate`)
  then the dropout key replaced by `shard_prng_key` (`jax.random.split(key, n)`), so each
  device draws different dropout masks; `apply_gradients` builds the next state;
- a host data loader shuffling with `jax.random.permutation` and yielding numpy batches,
  `shard` (reshape to `(local_device_count, -1, ...)`) before each step;
- host reads: `unreplicate(train_metric)` every `logging_steps`, `get_metrics` (`x[0]`,
  `device_get`, stack) then `jax.tree_map(jnp.mean, ...)` of the eval metrics, and
  `jax.device_get(unreplicate(state.params))` for the "checkpoint".

Scaled down: vocabulary 32, block size 8, 24 hidden units, 4 examples per device, 2
epochs of 4 steps, logging every 2 and evaluation every 3 steps, 2 eval batches. No
tokenizer, tensorboard or hub.

The original needs jax 0.4.38 (`jax.device_put_replicated` is gone from jax 0.10).
"""
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

VOCAB = 32
BLOCK = 8
HIDDEN = 24
DROPOUT = 0.1


def replicate(tree, devices=None):
    devices = devices or jax.local_devices()
    return jax.device_put_replicated(tree, devices)


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs)


def shard_prng_key(prng_key):
    return jax.random.split(prng_key, num=jax.local_device_count())


def onehot(labels, num_classes):
    return (labels[..., None] == jnp.arange(num_classes)).astype(jnp.float32)


def stack_forest(forest):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *forest)


def get_metrics(device_metrics):
    device_metrics = jax.tree_util.tree_map(lambda x: x[0], device_metrics)
    return stack_forest(jax.device_get(device_metrics))


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["step", "params", "opt_state", "dropout_rng"],
                   meta_fields=["tx"])
@dataclasses.dataclass(frozen=True)
class TrainState:
    """flax's `train_state.TrainState` plus the example's dropout key: a pytree dataclass
    whose optimiser is static (a meta field), with the example's `replicate()` method."""
    step: Any
    params: Any
    opt_state: Any
    dropout_rng: Any
    tx: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    @classmethod
    def create(cls, params, tx, dropout_rng):
        return cls(step=0, params=params, opt_state=tx.init(params), dropout_rng=dropout_rng,
                   tx=tx)

    def apply_gradients(self, grads, dropout_rng):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params, self.step)
        params = jax.tree_util.tree_map(lambda p, u: p + u, self.params, updates)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state,
                            dropout_rng=dropout_rng)

    def replicate(self):
        return replicate(self).replace(dropout_rng=shard_prng_key(self.dropout_rng))


class AdamW:
    """Static optimiser config carried as the state's auxiliary data (hashable)."""

    def __init__(self, learning_rate, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
        self.learning_rate, self.b1, self.b2 = learning_rate, b1, b2
        self.eps, self.weight_decay = eps, weight_decay

    def init(self, params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"mu": zeros, "nu": zeros}

    def update(self, grads, opt_state, params, step):
        count = step + 1
        mu = jax.tree_util.tree_map(lambda m, g: self.b1 * m + (1 - self.b1) * g,
                                    opt_state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: self.b2 * v + (1 - self.b2) * g * g,
                                    opt_state["nu"], grads)
        lr = self.learning_rate(step)

        def one(m, v, p, decay):
            m_hat = m / (1 - self.b1 ** count)
            v_hat = v / (1 - self.b2 ** count)
            return -lr * (m_hat / (jnp.sqrt(v_hat) + self.eps) + decay * self.weight_decay * p)

        mask = decay_mask_fn(params)
        updates = jax.tree_util.tree_map(one, mu, nu, params, mask)
        return updates, {"mu": mu, "nu": nu}


def decay_mask_fn(params):
    """No weight decay on biases and the layer-norm scale (the source's mask)."""
    return {name: not (name.endswith("bias") or name == "ln_scale") for name in params}


def create_learning_rate_fn(train_ds_size, train_batch_size, num_train_epochs,
                            num_warmup_steps, learning_rate):
    steps_per_epoch = train_ds_size // train_batch_size
    num_train_steps = steps_per_epoch * num_train_epochs

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm = learning_rate * step / max(num_warmup_steps, 1)
        decay = learning_rate * jnp.maximum(
            0.0, 1.0 - (step - num_warmup_steps) / (num_train_steps - num_warmup_steps))
        return jnp.where(step < num_warmup_steps, warm, decay)

    return schedule


def init_model(key):
    k1, k2 = jax.random.split(key)
    return {
        "embed": jax.random.normal(k1, (VOCAB, HIDDEN)) * 0.2,
        "mix_kernel": jax.random.normal(k2, (HIDDEN, HIDDEN)) / math.sqrt(HIDDEN),
        "mix_bias": jnp.zeros((HIDDEN,)),
        "ln_scale": jnp.ones((HIDDEN,)),
        "out_bias": jnp.zeros((VOCAB,)),
    }


def model_apply(params, input_ids, dropout_rng=None, train=False):
    h = params["embed"][input_ids]
    causal = jnp.tril(jnp.ones((BLOCK, BLOCK))) / jnp.arange(1, BLOCK + 1)[:, None]
    context = jnp.einsum("ts,bsd->btd", causal, h)
    h = h + jnp.tanh(context @ params["mix_kernel"] + params["mix_bias"])
    if train:
        keep = jax.random.bernoulli(dropout_rng, 1.0 - DROPOUT, h.shape)
        h = jnp.where(keep, h / (1.0 - DROPOUT), 0.0)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * params["ln_scale"]
    return (h @ params["embed"].T + params["out_bias"],)


def make_dataset(seed, num_examples):
    rng = np.random.RandomState(seed)
    starts = rng.randint(0, VOCAB, size=(num_examples, 1))
    steps = rng.randint(1, 3, size=(num_examples, 1))
    ids = (starts + steps * np.arange(BLOCK)[None, :]) % VOCAB
    ids = ids.astype(np.int32)
    return {"input_ids": ids, "labels": ids.copy()}


def data_loader(rng, dataset, batch_size, shuffle=False):
    size = len(dataset["input_ids"])
    steps_per_epoch = size // batch_size
    if shuffle:
        batch_idx = jax.random.permutation(rng, size)
    else:
        batch_idx = jnp.arange(size)
    batch_idx = np.asarray(batch_idx[: steps_per_epoch * batch_size])
    batch_idx = batch_idx.reshape((steps_per_epoch, batch_size))
    for idx in batch_idx:
        yield {k: np.array(v[idx]) for k, v in dataset.items()}


def main(seed=42, num_epochs=2, per_device_batch=4, logging_steps=2, eval_steps=3):
    rng = jax.random.PRNGKey(seed)
    rng, dropout_rng = jax.random.split(rng)

    train_batch_size = per_device_batch * jax.device_count()
    eval_batch_size = per_device_batch * jax.device_count()
    train_dataset = make_dataset(0, 4 * train_batch_size)
    eval_dataset = make_dataset(1, 2 * eval_batch_size)
    num_train = len(train_dataset["input_ids"])

    linear_decay_lr_schedule_fn = create_learning_rate_fn(
        num_train, train_batch_size, num_epochs, 2, 3e-2)
    optimizer = AdamW(linear_decay_lr_schedule_fn, weight_decay=0.01)

    rng, init_rng = jax.random.split(rng)
    state = TrainState.create(params=init_model(init_rng), tx=optimizer,
                              dropout_rng=dropout_rng)

    def loss_fn(logits, labels):
        shift_logits = logits[..., :-1, :]
        shift_labels = labels[..., 1:]
        loss = -jnp.sum(onehot(shift_labels, shift_logits.shape[-1])
                        * jax.nn.log_softmax(shift_logits), axis=-1)
        return loss.mean()

    def train_step(state, batch):
        dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

        def compute_loss(params):
            labels = batch.pop("labels")
            logits = model_apply(params, **batch, dropout_rng=dropout_rng, train=True)[0]
            return loss_fn(logits, labels)

        grad_fn = jax.value_and_grad(compute_loss)
        loss, grad = grad_fn(state.params)
        grad = jax.lax.pmean(grad, "batch")
        new_state = state.apply_gradients(grads=grad, dropout_rng=new_dropout_rng)
        metrics = {"loss": loss, "learning_rate": linear_decay_lr_schedule_fn(state.step)}
        metrics = jax.lax.pmean(metrics, axis_name="batch")
        return new_state, metrics

    def eval_step(params, batch):
        labels = batch.pop("labels")
        logits = model_apply(params, **batch, train=False)[0]
        metrics = {"loss": loss_fn(logits, labels)}
        return jax.lax.pmean(metrics, axis_name="batch")

    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    p_eval_step = jax.pmap(eval_step, "batch")

    state = state.replicate()

    logged, evals, checkpoints = [], [], []
    train_metrics = []
    for epoch in range(num_epochs):
        rng, input_rng = jax.random.split(rng)
        train_loader = data_loader(input_rng, train_dataset, train_batch_size, shuffle=True)
        steps_per_epoch = num_train // train_batch_size
        for step in range(steps_per_epoch):
            batch = shard(next(train_loader))
            state, train_metric = p_train_step(state, batch)
            train_metrics.append(train_metric)
            cur_step = epoch * steps_per_epoch + step

            if cur_step % logging_steps == 0 and cur_step > 0:
                train_metric = unreplicate(train_metric)
                logged.append([float(train_metric["loss"].mean()),
                               float(train_metric["learning_rate"].mean())])
                train_metrics = []

            if cur_step % eval_steps == 0 and cur_step > 0:
                eval_metrics = []
                eval_loader = data_loader(input_rng, eval_dataset, eval_batch_size)
                for _ in range(len(eval_dataset["input_ids"]) // eval_batch_size):
                    metrics = p_eval_step(state.params, shard(next(eval_loader)))
                    eval_metrics.append(metrics)
                eval_metrics = get_metrics(eval_metrics)
                eval_metrics = jax.tree_util.tree_map(jnp.mean, eval_metrics)
                eval_metrics["perplexity"] = math.exp(eval_metrics["loss"])
                evals.append([float(eval_metrics["loss"]), eval_metrics["perplexity"]])

            if cur_step % 5 == 0 and cur_step > 0:
                params = jax.device_get(unreplicate(state.params))
                checkpoints.append(np.asarray(params["out_bias"]))

    eval_metrics = []
    eval_loader = data_loader(input_rng, eval_dataset, eval_batch_size)
    for _ in range(len(eval_dataset["input_ids"]) // eval_batch_size):
        batch = shard(next(eval_loader))
        eval_metrics.append(p_eval_step(state.params, batch))
    eval_metrics = get_metrics(eval_metrics)
    eval_metrics = jax.tree_util.tree_map(lambda x: jnp.mean(x).item(), eval_metrics)

    final = jax.device_get(unreplicate(state.params))
    return {
        "logged": np.asarray(logged),
        "evals": np.asarray(evals),
        "checkpoint_out_bias": np.stack(checkpoints),
        "final_eval_loss": np.asarray(eval_metrics["loss"]),
        "embed": np.asarray(final["embed"]),
        "mix_kernel": np.asarray(final["mix_kernel"]),
        "step": np.asarray(state.step),
        "dropout_rng": np.asarray(state.dropout_rng),
    }


def run():
    return main()
