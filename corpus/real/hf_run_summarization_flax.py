"""Modelled on Hugging Face transformers' Flax summarization example
(examples/flax/summarization/run_summarization_flax.py).

Source: github.com/huggingface/transformers, examples/flax/summarization/run_summarization_flax.py
at commit 00e12e7c54598e50e7bef1540db3408f81916de1, with the flax helpers it imports
(`jax_utils.replicate` / `unreplicate`, `common_utils.shard` / `get_metrics` / `onehot`,
`training.common_utils.shard_prng_key`). transformers, datasets, flax, optax, nltk and the
rouge metric are not used: the model is a tiny encoder-decoder in plain jax.numpy (masked
mean-pooled encoder, causal decoder, greedy `generate` in a `lax.fori_loop`) that keeps its
parameters on `self.params` like a Flax pretrained model, the optimiser a hand-written AdamW
with a decay mask under a linear warmup / decay schedule, the data seeded numpy
"documents" whose "summary" is their first tokens, and the metric a unigram-overlap F1.
All code here is written anew.

pmap features kept:
- `train_step(state, batch, label_smoothing_factor=0.0)`, `eval_step(params, batch,
  label_smoothing_factor=0.0)` and `generate_step(params, batch)` nested in `main()`;
  `jax.pmap(partial(train_step, label_smoothing_factor=...), "batch", donate_argnums=(0,))`,
  `jax.pmap(partial(eval_step, label_smoothing_factor=...), "batch")` and
  `jax.pmap(generate_step, "batch")`, axis names positional;
- `generate_step` assigns the traced params to the model object (`model.params = params`)
  and calls `model.generate(...)`, reading `.sequences`;
- `batch.pop("labels")` inside the mapped functions, label-smoothed cross-entropy masked
  by the decoder attention mask, `lax.pmean` of grads and metrics dicts;
- the train state (a pytree dataclass with a static optimiser) replicated by its
  `replicate()` method (`jax.device_put_replicated`, then `shard_prng_key` dropout keys);
- the data loader builds `jnp.array` batches and `shard`s them itself;
- host reads: `unreplicate(train_metric)` after each epoch, `get_metrics` + `tree_map(
  jnp.mean)`, `jax.device_get(generated_ids.reshape(-1, max_length))` of the pmap output
  and of the sharded labels, `jax.device_get(jax.tree_map(lambda x: x[0], state.params))`
  for the per-epoch "checkpoint"; a predict loop after training.

Scaled down: vocabulary 16, source length 8, target length 4, 2 examples per device, 2
epochs of 3 steps, 2 eval and 1 predict batches.

The original needs jax 0.4.38 (`jax.device_put_replicated` is gone from jax 0.10).
"""
import dataclasses
import functools
import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

VOCAB = 16
SRC_LEN = 8
TGT_LEN = 4
HIDDEN = 16
PAD = 0
DECODER_START = 1


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


def onehot(labels, num_classes, on_value=1.0, off_value=0.0):
    x = labels[..., None] == jnp.arange(num_classes)
    return jnp.where(x, on_value, off_value).astype(jnp.float32)


def get_metrics(device_metrics):
    device_metrics = jax.tree_util.tree_map(lambda x: x[0], device_metrics)
    metrics_np = jax.device_get(device_metrics)
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *metrics_np)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["step", "params", "opt_state", "dropout_rng"],
                   meta_fields=["apply_fn", "tx"])
@dataclasses.dataclass(frozen=True)
class TrainState:
    step: Any
    params: Any
    opt_state: Any
    dropout_rng: Any
    apply_fn: Any
    tx: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    @classmethod
    def create(cls, *, apply_fn, params, tx, dropout_rng):
        return cls(step=0, params=params, opt_state=tx.init(params), dropout_rng=dropout_rng,
                   apply_fn=apply_fn, tx=tx)

    def apply_gradients(self, *, grads, **kwargs):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params, self.step)
        params = jax.tree_util.tree_map(lambda p, u: p + u, self.params, updates)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state, **kwargs)

    def replicate(self):
        return replicate(self).replace(dropout_rng=shard_prng_key(self.dropout_rng))


def decay_mask_fn(params):
    return {k: not (k.endswith("bias") or k.endswith("layer_norm_scale")) for k in params}


class AdamW:
    def __init__(self, learning_rate, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01,
                 mask=None):
        self.learning_rate, self.b1, self.b2, self.eps = learning_rate, b1, b2, eps
        self.weight_decay, self.mask = weight_decay, mask

    def init(self, params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"mu": zeros, "nu": zeros}

    def update(self, grads, state, params, step):
        count = step + 1
        mu = jax.tree_util.tree_map(lambda m, g: self.b1 * m + (1 - self.b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: self.b2 * v + (1 - self.b2) * g * g, state["nu"], grads)
        lr = self.learning_rate(step)
        c1, c2 = 1 - self.b1 ** count, 1 - self.b2 ** count
        decay = self.mask(params)
        updates = jax.tree_util.tree_map(
            lambda m, v, p, d: -lr * ((m / c1) / (jnp.sqrt(v / c2) + self.eps)
                                      + d * self.weight_decay * p), mu, nu, params, decay)
        return updates, {"mu": mu, "nu": nu}


def create_learning_rate_fn(train_ds_size, train_batch_size, num_train_epochs,
                            num_warmup_steps, learning_rate):
    num_train_steps = (train_ds_size // train_batch_size) * num_train_epochs

    def schedule_fn(step):
        step = jnp.asarray(step, jnp.float32)
        warm = learning_rate * step / num_warmup_steps
        decay = learning_rate * (1.0 - (step - num_warmup_steps) / (num_train_steps - num_warmup_steps))
        return jnp.where(step < num_warmup_steps, warm, jnp.maximum(decay, 0.0))

    return schedule_fn


class Seq2SeqModel:
    """A pretrained-style model: parameters on `self.params`, `__call__(..., params=)`,
    `generate(...)` reading `self.params`."""

    def __init__(self, seed):
        ks = jax.random.split(jax.random.PRNGKey(seed), 3)
        self.params = {
            "shared_embedding": jax.random.normal(ks[0], (VOCAB, HIDDEN)) * 0.3,
            "encoder_kernel": jax.random.normal(ks[1], (HIDDEN, HIDDEN)) / math.sqrt(HIDDEN),
            "decoder_kernel": jax.random.normal(ks[2], (2 * HIDDEN, HIDDEN)) / math.sqrt(2 * HIDDEN),
            "decoder_bias": jnp.zeros((HIDDEN,)),
            "layer_norm_scale": jnp.ones((HIDDEN,)),
            "lm_head_bias": jnp.zeros((VOCAB,)),
        }

    def encode(self, params, input_ids, attention_mask):
        h = params["shared_embedding"][input_ids] * attention_mask[..., None]
        pooled = h.sum(1) / jnp.maximum(attention_mask.sum(1, keepdims=True), 1.0)
        return jnp.tanh(pooled @ params["encoder_kernel"])

    def decode(self, params, context, decoder_input_ids, dropout_rng=None, train=False):
        t = decoder_input_ids.shape[-1]
        e = params["shared_embedding"][decoder_input_ids]
        causal = jnp.tril(jnp.ones((t, t))) / jnp.arange(1, t + 1)[:, None]
        e = jnp.einsum("ts,bsd->btd", causal, e)
        ctx = jnp.broadcast_to(context[:, None, :], e.shape)
        h = jnp.tanh(jnp.concatenate([e, ctx], -1) @ params["decoder_kernel"] + params["decoder_bias"])
        if train:
            keep = jax.random.bernoulli(dropout_rng, 0.9, h.shape)
            h = jnp.where(keep, h / 0.9, 0.0)
        h = h * params["layer_norm_scale"]
        return h @ params["shared_embedding"].T + params["lm_head_bias"]

    def __call__(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
                 params=None, dropout_rng=None, train=False):
        params = self.params if params is None else params
        context = self.encode(params, input_ids, attention_mask)
        return (self.decode(params, context, decoder_input_ids, dropout_rng, train),)

    def generate(self, input_ids, attention_mask=None, max_length=TGT_LEN, num_beams=1):
        del num_beams
        params = self.params
        context = self.encode(params, input_ids, attention_mask)
        sequences = jnp.full((input_ids.shape[0], max_length + 1), PAD, jnp.int32)
        sequences = sequences.at[:, 0].set(DECODER_START)

        def body(i, seqs):
            logits = self.decode(params, context, seqs[:, :-1])
            next_token = jnp.argmax(logits[:, i], axis=-1).astype(jnp.int32)
            return seqs.at[:, i + 1].set(next_token)

        sequences = jax.lax.fori_loop(0, max_length, body, sequences)
        return GenerateOutput(sequences=sequences[:, 1:])


@dataclasses.dataclass
class GenerateOutput:
    sequences: Any


def make_dataset(seed, num_examples):
    rng = np.random.RandomState(seed)
    input_ids = rng.randint(2, VOCAB, size=(num_examples, SRC_LEN)).astype(np.int32)
    lengths = rng.randint(5, SRC_LEN + 1, size=num_examples)
    attention_mask = (np.arange(SRC_LEN)[None, :] < lengths[:, None]).astype(np.int32)
    input_ids = np.where(attention_mask == 1, input_ids, PAD)
    labels = np.sort(input_ids[:, :TGT_LEN], axis=1)[:, ::-1].copy()
    decoder_input_ids = np.concatenate(
        [np.full((num_examples, 1), DECODER_START, np.int32), labels[:, :-1]], axis=1)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "labels": labels.astype(np.int32), "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": (labels != PAD).astype(np.int32)}


def data_loader(rng, dataset, batch_size, shuffle=False):
    size = len(dataset["input_ids"])
    steps_per_epoch = size // batch_size
    if shuffle:
        batch_idx = jax.random.permutation(rng, size)
    else:
        batch_idx = jnp.arange(size)
    batch_idx = batch_idx[: steps_per_epoch * batch_size]
    batch_idx = batch_idx.reshape((steps_per_epoch, batch_size))
    for idx in batch_idx:
        idx = np.asarray(idx)
        batch = {k: jnp.array(v[idx]) for k, v in dataset.items()}
        batch = shard(batch)
        yield batch


def compute_metrics(preds, labels):
    scores = []
    for pred, label in zip(preds, labels):
        p, l = set(int(x) for x in pred if x != PAD), set(int(x) for x in label if x != PAD)
        overlap = len(p & l)
        scores.append(0.0 if not overlap else 2 * overlap / (len(p) + len(l)))
    return {"overlap_f1": float(np.mean(scores))}


def main(seed=42, num_epochs=2, per_device_batch=2, label_smoothing_factor=0.1):
    rng = jax.random.PRNGKey(seed)
    rng, dropout_rng = jax.random.split(rng)
    train_batch_size = per_device_batch * jax.device_count()
    eval_batch_size = per_device_batch * jax.device_count()
    train_dataset = make_dataset(0, 3 * train_batch_size)
    eval_dataset = make_dataset(1, 2 * eval_batch_size)
    predict_dataset = make_dataset(2, eval_batch_size)
    model = Seq2SeqModel(seed=3)

    linear_decay_lr_schedule_fn = create_learning_rate_fn(
        len(train_dataset["input_ids"]), train_batch_size, num_epochs, 2, 5e-2)
    adamw = AdamW(learning_rate=linear_decay_lr_schedule_fn, weight_decay=0.01,
                  mask=decay_mask_fn)
    state = TrainState.create(apply_fn=model.__call__, params=model.params, tx=adamw,
                              dropout_rng=dropout_rng)

    def loss_fn(logits, labels, padding_mask, label_smoothing_factor=0.0):
        vocab_size = logits.shape[-1]
        confidence = 1.0 - label_smoothing_factor
        low_confidence = (1.0 - confidence) / (vocab_size - 1)
        normalizing_constant = -(
            confidence * jnp.log(confidence)
            + (vocab_size - 1) * low_confidence * jnp.log(low_confidence + 1e-20))
        soft_labels = onehot(labels, vocab_size, on_value=confidence, off_value=low_confidence)
        loss = -jnp.sum(soft_labels * jax.nn.log_softmax(logits), axis=-1)
        loss = loss - normalizing_constant
        loss = loss * padding_mask
        return loss.sum() / padding_mask.sum()

    def train_step(state, batch, label_smoothing_factor=0.0):
        dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

        def compute_loss(params):
            labels = batch.pop("labels")
            logits = state.apply_fn(**batch, params=params, dropout_rng=dropout_rng, train=True)[0]
            return loss_fn(logits, labels, batch["decoder_attention_mask"], label_smoothing_factor)

        grad_fn = jax.value_and_grad(compute_loss)
        loss, grad = grad_fn(state.params)
        grad = jax.lax.pmean(grad, "batch")
        new_state = state.apply_gradients(grads=grad, dropout_rng=new_dropout_rng)
        metrics = {"loss": loss, "learning_rate": linear_decay_lr_schedule_fn(state.step)}
        metrics = jax.lax.pmean(metrics, axis_name="batch")
        return new_state, metrics

    def eval_step(params, batch, label_smoothing_factor=0.0):
        labels = batch.pop("labels")
        logits = model(**batch, params=params, train=False)[0]
        loss = loss_fn(logits, labels, batch["decoder_attention_mask"], label_smoothing_factor)
        metrics = {"loss": loss}
        return jax.lax.pmean(metrics, axis_name="batch")

    gen_kwargs = {"max_length": TGT_LEN, "num_beams": 1}

    def generate_step(params, batch):
        model.params = params
        output_ids = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"],
                                    **gen_kwargs)
        return output_ids.sequences

    p_train_step = jax.pmap(
        partial(train_step, label_smoothing_factor=label_smoothing_factor), "batch",
        donate_argnums=(0,))
    p_eval_step = jax.pmap(partial(eval_step, label_smoothing_factor=label_smoothing_factor),
                           "batch")
    p_generate_step = jax.pmap(generate_step, "batch")

    state = state.replicate()

    epoch_rows, checkpoints = [], []
    for epoch in range(num_epochs):
        rng, input_rng = jax.random.split(rng)
        train_metrics = []
        train_loader = data_loader(input_rng, train_dataset, train_batch_size, shuffle=True)
        steps_per_epoch = len(train_dataset["input_ids"]) // train_batch_size
        for _ in range(steps_per_epoch):
            batch = next(train_loader)
            state, train_metric = p_train_step(state, batch)
            train_metrics.append(train_metric)
        train_metric = unreplicate(train_metric)

        eval_metrics, eval_preds, eval_labels = [], [], []
        eval_loader = data_loader(input_rng, eval_dataset, eval_batch_size)
        for _ in range(len(eval_dataset["input_ids"]) // eval_batch_size):
            batch = next(eval_loader)
            labels = batch["labels"]
            metrics = p_eval_step(state.params, batch)
            eval_metrics.append(metrics)
            generated_ids = p_generate_step(state.params, batch)
            eval_preds.extend(jax.device_get(generated_ids.reshape(-1, gen_kwargs["max_length"])))
            eval_labels.extend(jax.device_get(labels.reshape(-1, labels.shape[-1])))
        eval_metrics = get_metrics(eval_metrics)
        eval_metrics = jax.tree_util.tree_map(jnp.mean, eval_metrics)
        eval_metrics.update(compute_metrics(eval_preds, eval_labels))
        epoch_rows.append([float(train_metric["loss"]), float(train_metric["learning_rate"]),
                           float(eval_metrics["loss"]), eval_metrics["overlap_f1"]])

        params = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state.params))
        checkpoints.append(np.asarray(params["lm_head_bias"]))

    pred_metrics, pred_generations, pred_labels = [], [], []
    pred_loader = data_loader(input_rng, predict_dataset, eval_batch_size)
    for _ in range(len(predict_dataset["input_ids"]) // eval_batch_size):
        batch = next(pred_loader)
        labels = batch["labels"]
        pred_metrics.append(p_eval_step(state.params, batch))
        generated_ids = p_generate_step(state.params, batch)
        pred_generations.extend(jax.device_get(generated_ids.reshape(-1, gen_kwargs["max_length"])))
        pred_labels.extend(jax.device_get(labels.reshape(-1, labels.shape[-1])))
    pred_metrics = get_metrics(pred_metrics)
    pred_metrics = jax.tree_util.tree_map(jnp.mean, pred_metrics)
    pred_metrics.update(compute_metrics(pred_generations, pred_labels))

    return {
        "epochs": np.asarray(epoch_rows),
        "checkpoint_lm_head_bias": np.stack(checkpoints),
        "predict": np.asarray([float(pred_metrics["loss"]), pred_metrics["overlap_f1"]]),
        "pred_generations": np.stack(pred_generations),
        "embedding": np.asarray(params["shared_embedding"]),
        "step": np.asarray(state.step),
    }


def run():
    return main()
