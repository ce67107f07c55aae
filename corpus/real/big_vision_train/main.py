"""Modelled on google-research/big_vision's classification trainer (big_vision/train.py)
from before its jit transition.

Source: github.com/google-research/big_vision, big_vision/train.py, utils.py,
input_pipeline.py and evaluators/classification.py at commit
50622cb37bc42080e31309d0c47dc585425761f9 (2023-10-13, the parent of 538b8a8 "jit
transition", which replaced these pmaps by jit over a mesh). The package keeps the source's
split: this module is train.py (`main()` and the loop, entry `run()`), `utils.py` the
losses / mixup / `sync()`, `input_pipeline.py` the shard-and-put prefetching, and
`classification.py` the evaluator. flax, optax, tf.data, ml_collections and the metric
writer are not used: the model is a two-layer MLP with dropout in plain jax.numpy, the
optimiser a hand-written momentum SGD with a warmup / cosine schedule, and the data seeded
numpy. All code here is written anew.

pmap features kept:
- `update_fn` nested in `main()`, decorated `@functools.partial(jax.pmap,
  axis_name="batch", donate_argnums=(0, 1))`, closing over the config, the model and the
  optimiser; it takes replicated params / optimiser state / rng and per-device images and
  labels, returns them with the loss and a measurements dict; inside: mixup with a
  per-device `fold_in(rng, lax.axis_index("batch"))`, a per-device dropout key the same
  way, `lax.pmean((l, grads), axis_name="batch")` of a tuple;
- params and optimiser state built on the CPU by `jax.jit(..., backend="cpu")`, then
  replicated (flax-style `replicate`: `jax.device_put_replicated`), the loop rng too;
- batches split and placed with `jax.device_put_sharded` by the input pipeline, prefetched;
- `loss_value[0]` and `value[0]` of each measurement read on the host for logging;
  the checkpoint as `jax.tree_map(lambda x: np.array(x[0]), params_repl)`;
- a `predict_fn` def handed to an evaluator (another module) that builds its own
  `lru_cache`d pmap with `psum`s and reads `np.array(x[0])` of the results;
- `u.sync()` (a pmap of a psum, in utils.py) at the end.

Scaled down: 12-feature synthetic data in 6 classes, global batch 4 per device, 12 steps,
logging every 4, checkpoint every 6, evaluation every 6 steps over 3 batches.

The original needs jax 0.4.38 (`jax.device_put_replicated` / `jax.device_put_sharded`).
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import big_vision_train.classification as classification
import big_vision_train.input_pipeline as input_pipeline
import big_vision_train.utils as u

CONFIG = {
    "seed": 0,
    "batch_size_per_device": 4,
    "total_steps": 12,
    "log_training_steps": 4,
    "ckpt_steps": 6,
    "eval_steps": 6,
    "lr": 0.1,
    "warmup_steps": 3,
    "mixup": {"p": 0.2, "fold_in": "device"},
    "loss": "softmax_xent",
    "init_head_bias": -1.0,
    "hidden": 24,
    "dropout": 0.1,
}


def replicate(tree, devices=None):
    devices = devices or input_pipeline._pmap_device_order()
    return jax.device_put_replicated(tree, devices)


class Model:
    def __init__(self, hidden, num_classes, dropout):
        self.hidden, self.num_classes, self.dropout = hidden, num_classes, dropout

    def init(self, rng, image):
        k1, k2 = jax.random.split(rng)
        d = image.shape[-1]
        return {"params": {
            "hidden": {"kernel": jax.random.normal(k1, (d, self.hidden)) / math.sqrt(d),
                       "bias": jnp.zeros((self.hidden,))},
            "head": {"kernel": jax.random.normal(k2, (self.hidden, self.num_classes)) * 0.1,
                     "bias": jnp.zeros((self.num_classes,))},
        }}

    def apply(self, variables, image, train=False, rngs=None):
        p = variables["params"]
        h = jax.nn.relu(image @ p["hidden"]["kernel"] + p["hidden"]["bias"])
        if train:
            keep = jax.random.bernoulli(rngs["dropout"], 1.0 - self.dropout, h.shape)
            h = jnp.where(keep, h / (1.0 - self.dropout), 0.0)
        logits = h @ p["head"]["kernel"] + p["head"]["bias"]
        return logits, {"pre_logits": h}


class MomentumSGD:
    """optax-like (init, update) pair: momentum 0.9, the schedule read from the count."""

    def __init__(self, schedule):
        self.schedule = schedule

    def init(self, params):
        return {"count": jnp.zeros((), jnp.int32),
                "mu": jax.tree_util.tree_map(jnp.zeros_like, params)}

    def update(self, grads, opt, params):
        del params
        lr = self.schedule(opt["count"])
        mu = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, opt["mu"], grads)
        updates = jax.tree_util.tree_map(lambda m: -lr * m, mu)
        return updates, {"count": opt["count"] + 1, "mu": mu}


def make_schedule(base_lr, warmup_steps, total_steps):
    def step_fn(step):
        step = jnp.asarray(step, jnp.float32)
        progress = jnp.clip((step - warmup_steps) / (total_steps - warmup_steps), 0.0, 1.0)
        lr = base_lr * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        lr = lr * jnp.minimum(1.0, step / warmup_steps)
        return jnp.asarray(lr, dtype=jnp.float32)
    return step_fn


def main(config):
    rng = jax.random.PRNGKey(config["seed"])
    batch_size = config["batch_size_per_device"] * jax.device_count()
    total_steps = config["total_steps"]
    train_ds = input_pipeline.synthetic_data(config["seed"] + 1, batch_size)
    train_iter = input_pipeline.start_input_pipeline(train_ds, 1)
    model = Model(config["hidden"], input_pipeline.NUM_CLASSES, config["dropout"])

    @functools.partial(jax.jit, backend="cpu")
    def init(rng):
        bs = batch_size // jax.device_count()
        no_image = jnp.zeros((bs, input_pipeline.FEATURES), jnp.float32)
        params = model.init(rng, no_image)["params"]
        if "init_head_bias" in config:
            params["head"]["bias"] = jnp.full_like(params["head"]["bias"],
                                                   config["init_head_bias"])
        return params

    rng, rng_init = jax.random.split(rng)
    params_cpu = init(rng_init)

    sched_fn = make_schedule(config["lr"], config["warmup_steps"], total_steps)
    tx = MomentumSGD(sched_fn)
    opt_cpu = jax.jit(tx.init, backend="cpu")(params_cpu)
    sched_fns_cpu = [jax.jit(sched_fn, backend="cpu")]

    @functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0, 1))
    def update_fn(params, opt, rng, images, labels):
        measurements = {}
        if config.get("mixup") and config["mixup"]["p"]:
            rng, (images, labels) = u.mixup(rng, images, labels, **config["mixup"])

        rng, rng_model = jax.random.split(rng, 2)
        rng_model_local = jax.random.fold_in(rng_model, jax.lax.axis_index("batch"))

        def loss_fn(params, images, labels):
            logits, _ = model.apply({"params": params}, images, train=True,
                                    rngs={"dropout": rng_model_local})
            return getattr(u, config.get("loss", "sigmoid_xent"))(logits=logits, labels=labels)

        l, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        l, grads = jax.lax.pmean((l, grads), axis_name="batch")
        updates, opt = tx.update(grads, opt, params)
        params = jax.tree_util.tree_map(lambda p, v: p + v, params, updates)

        gs = jax.tree_util.tree_leaves(grads)
        measurements["l2_grads"] = jnp.sqrt(sum([jnp.vdot(g, g) for g in gs]))
        ps = jax.tree_util.tree_leaves(params)
        measurements["l2_params"] = jnp.sqrt(sum([jnp.vdot(p, p) for p in ps]))
        us = jax.tree_util.tree_leaves(updates)
        measurements["l2_updates"] = jnp.sqrt(sum([jnp.vdot(v, v) for v in us]))
        return params, opt, rng, l, measurements

    def predict_fn(params, image):
        logits, out = model.apply({"params": params}, image)
        return logits, out

    @functools.lru_cache(maxsize=None)
    def evaluators():
        return [("val", classification.Evaluator(predict_fn, batch_size, config["loss"]),
                 config["eval_steps"], "val/")]

    first_step = int(opt_cpu["count"])
    params_repl = replicate(params_cpu)
    opt_repl = replicate(opt_cpu)
    rng, rng_loop = jax.random.split(rng, 2)
    rngs_loop = replicate(rng_loop)

    log, ckpts, evals = [], [], []
    for step, batch in zip(range(first_step + 1, total_steps + 1), train_iter):
        params_repl, opt_repl, rngs_loop, loss_value, measurements = update_fn(
            params_repl, opt_repl, rngs_loop, batch["image"], batch["labels"])

        if u.itstime(step, config["log_training_steps"], total_steps):
            row = [float(sched_fn_cpu(step - 1)) for sched_fn_cpu in sched_fns_cpu]
            l = float(loss_value[0])
            row.append(l)
            for name in sorted(measurements):
                row.append(float(measurements[name][0]))
            if not np.isfinite(l):
                raise RuntimeError(f"The loss became nan or inf at step {step}")
            log.append(row)

        if u.itstime(step, config["ckpt_steps"], total_steps, first=False):
            params_cpu = jax.tree_util.tree_map(lambda x: np.array(x[0]), params_repl)
            opt_cpu = jax.tree_util.tree_map(lambda x: np.array(x[0]), opt_repl)
            ckpts.append(np.concatenate([params_cpu["head"]["bias"],
                                         [opt_cpu["count"]]]))

        for (name, evaluator, log_steps, prefix) in evaluators():
            if u.itstime(step, log_steps, total_steps, first=False):
                evals.append([value for _, value in evaluator.run(params_repl)])

    u.sync()
    return {
        "log": np.asarray(log),
        "ckpts": np.stack(ckpts),
        "evals": np.asarray(evals, dtype=np.float64),
        "head_kernel": params_cpu["head"]["kernel"],
        "hidden_kernel": params_cpu["hidden"]["kernel"],
        "rng_loop": np.asarray(rngs_loop),
    }


def run():
    return main(dict(CONFIG, mixup=dict(CONFIG["mixup"])))
