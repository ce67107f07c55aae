"""Modelled on deepmind-research's nfnets/experiment.py (google-deepmind/deepmind-research
@ 6fcb84268e74af981ae1496bfc2cb9ba9d701ef2), a jaxline experiment: `Experiment.__init__`
builds `self.train_fn = jax.pmap(self._train_fn, axis_name="i",
donate_argnums=(0, 1, 2, 6, 7))` and `self.eval_fn = jax.pmap(self._eval_fn,
axis_name="i")` from bound methods; `_initialize_train` creates params and state with an
inline `jax.pmap(lambda *a: self.net.init(*a, is_training=True), axis_name="i")` applied to
`bcast_local_devices(self.init_rng)` and the first (already device-shaped) batch, twice
(the EMA copy); the optimiser state is built from the replicated params ("no need to
broadcast"); `step()` calls `self.train_fn` with keyword arguments only and returns
`get_first(out["metrics"])`; the train step divides the loss by `jax.device_count()`,
`lax.psum`s the grads and `lax.pmean`s the metrics, reads the learning rate from the
per-device global step, and updates EMA copies with `tree_map`; evaluation psums per-example
metrics and reads them back as `jnp.sum(x[0], axis=0)`, then `device_get`. haiku, optax
and the ImageNet pipeline are not used: a two-layer MLP with a running-mean state in plain
jax.numpy, a hand-written Nesterov SGD with weight decay, seeded numpy batches shaped
`[local_device_count, per_device, ...]`. Written anew."""
import math

import jax
import jax.numpy as jnp
import numpy as np

import jaxline_nfnets.experiment as experiment
import jaxline_nfnets.utils as jl_utils

NUM_CLASSES = 5
FEATURES = 10


def get_config():
    return {
        "random_seed": 0,
        "training_steps": 9,
        "random_mode_train": "unique_host_unique_device",
        "random_mode_eval": "same_host_unique_device",
        "log_tensors_interval": 3,
        "save_checkpoint_interval": 4,
        "experiment_kwargs": {"config": {
            "lr": 0.1, "label_smoothing": 0.1, "use_ema": True, "ema_decay": 0.9,
            "train_batch_size_per_device": 4, "eval_batch_size_per_device": 3,
            "eval_batches": 2, "hidden": 16, "drop_rate": 0.2, "warmup_steps": 2,
            "momentum": 0.9, "weight_decay": 1e-4,
        }},
    }


class Net:
    """A stand-in for `hk.transform_with_state`: init -> (params, state), apply -> (out, state)."""

    def __init__(self, hidden, drop_rate):
        self.hidden, self.drop_rate = hidden, drop_rate

    def init(self, rng, inputs, is_training):
        del is_training
        k1, k2 = jax.random.split(rng)
        params = {"linear": {"w": jax.random.normal(k1, (FEATURES, self.hidden)) / math.sqrt(FEATURES),
                             "b": jnp.zeros((self.hidden,))},
                  "logits": {"w": jax.random.normal(k2, (self.hidden, NUM_CLASSES)) * 0.1,
                             "b": jnp.zeros((NUM_CLASSES,))}}
        state = {"mean": jnp.zeros((self.hidden,)) + 0.0 * inputs["images"].sum()}
        return params, state

    def apply(self, params, state, rng, inputs, is_training):
        h = inputs["images"] @ params["linear"]["w"] + params["linear"]["b"]
        if is_training:
            state = {"mean": 0.9 * state["mean"] + 0.1 * h.mean(0)}
        h = jax.nn.relu(h - state["mean"])
        if is_training and rng is not None:
            keep = jax.random.bernoulli(rng, 1.0 - self.drop_rate, h.shape)
            h = jnp.where(keep, h / (1.0 - self.drop_rate), 0.0)
        return h @ params["logits"]["w"] + params["logits"]["b"], state


def warmup_cosine(max_val, num_steps, warmup_steps):
    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm = max_val * step / warmup_steps
        cos = 0.5 * max_val * (1 + jnp.cos(jnp.pi * (step - warmup_steps) / (num_steps - warmup_steps)))
        return jnp.where(step < warmup_steps, warm, cos)
    return schedule


class SGD:
    """Nesterov SGD with weight decay on weights only (the nfnets optimiser's split)."""

    def __init__(self, params, lr, momentum, weight_decay):
        self._hyperparameters = {"lr": lr}
        self.momentum, self.weight_decay = momentum, weight_decay
        self._params = params
        self._states = None

    def states(self):
        return jax.tree_util.tree_map(jnp.zeros_like, self._params)

    def plugin(self, states):
        self._states = states

    def step(self, params, grads, states, step):
        lr = self._hyperparameters["lr"](step)

        def one(path, p, g, m):
            decays = path[-1].key == "w"
            g = g + self.weight_decay * p if decays else g
            m = self.momentum * m + g
            return p - lr * (g + self.momentum * m), m

        out = jax.tree_util.tree_map_with_path(one, params, grads, states)
        new_params = jax.tree_util.tree_map(lambda _, o: o[0], params, out)
        new_states = jax.tree_util.tree_map(lambda _, o: o[1], params, out)
        return new_params, new_states


def topk_correct(logits, labels, prefix=""):
    top1 = jnp.argmax(logits, -1) == labels
    return {f"{prefix}top_1_acc": top1.astype(jnp.float32)}


def softmax_cross_entropy(logits, y, reduction="mean"):
    loss = -jnp.sum(y * jax.nn.log_softmax(logits), axis=-1)
    return jnp.mean(loss) if reduction == "mean" else loss


def tf1_ema(ema_value, current_value, decay, step):
    decay = jnp.minimum(decay, (1.0 + step) / (10.0 + step))
    return decay * ema_value + (1.0 - decay) * current_value


def load_dataset(seed, batch_dims, num_batches=None):
    centres = np.random.RandomState(21).normal(scale=1.5, size=(NUM_CLASSES, FEATURES))
    rng = np.random.RandomState(seed)
    produced = 0
    while num_batches is None or produced < num_batches:
        labels = rng.randint(0, NUM_CLASSES, size=tuple(batch_dims))
        images = centres[labels] + rng.normal(size=tuple(batch_dims) + (FEATURES,))
        yield {"images": images.astype(np.float32), "labels": labels.astype(np.int32)}
        produced += 1


class Experiment(experiment.AbstractExperiment):
    CHECKPOINT_ATTRS = {
        "_params": "params",
        "_state": "state",
        "_ema_params": "ema_params",
        "_ema_state": "ema_state",
        "_opt_state": "opt_state",
    }

    def __init__(self, mode, config, init_rng):
        super().__init__(mode=mode, init_rng=init_rng)
        self.config = config
        self._params = None
        self._state = None
        self._ema_params = None
        self._ema_state = None
        self._opt_state = None
        self._train_input = None
        self.net = Net(config["hidden"], config["drop_rate"])

        donate_argnums = (0, 1, 2, 6, 7) if self.config["use_ema"] else (0, 1, 2)
        self.train_fn = jax.pmap(self._train_fn, axis_name="i", donate_argnums=donate_argnums)
        self.eval_fn = jax.pmap(self._eval_fn, axis_name="i")

    def _initialize_train(self):
        self._train_input = jl_utils.py_prefetch(self._build_train_input)
        if self._params is None:
            inputs = next(self._train_input)
            init_net = jax.pmap(lambda *a: self.net.init(*a, is_training=True), axis_name="i")
            init_rng = jl_utils.bcast_local_devices(self.init_rng)
            self._params, self._state = init_net(init_rng, inputs)
            if self.config["use_ema"]:
                self._ema_params, self._ema_state = init_net(init_rng, inputs)
        self._make_opt()

    def _make_opt(self):
        max_lr = self.config["lr"]
        lr_schedule = warmup_cosine(max_lr, 9, self.config["warmup_steps"])
        self.opt = SGD(self._params, lr_schedule, self.config["momentum"],
                       self.config["weight_decay"])
        if self._opt_state is None:
            self._opt_state = self.opt.states()
        else:
            self.opt.plugin(self._opt_state)

    def _loss_fn(self, params, state, inputs, rng):
        logits, state = self.net.apply(params, state, rng, inputs, is_training=True)
        y = jax.nn.one_hot(inputs["labels"], NUM_CLASSES)
        if self.config["label_smoothing"] > 0:
            spositives = 1.0 - self.config["label_smoothing"]
            snegatives = self.config["label_smoothing"] / NUM_CLASSES
            y = spositives * y + snegatives
        loss = softmax_cross_entropy(logits, y, reduction="mean")
        metrics = topk_correct(logits, inputs["labels"], prefix="train_")
        metrics = jax.tree_util.tree_map(jnp.mean, metrics)
        metrics["train_loss"] = loss
        scaled_loss = loss / jax.device_count()
        return scaled_loss, (metrics, state)

    def _train_fn(self, params, states, opt_states, inputs, rng, global_step,
                  ema_params, ema_states):
        grad_fn = jax.grad(self._loss_fn, argnums=0, has_aux=True)
        grads, (metrics, states) = grad_fn(params, states, inputs, rng)
        grads = jax.lax.psum(grads, "i")
        metrics = jax.lax.pmean(metrics, "i")
        metrics["learning_rate"] = self.opt._hyperparameters["lr"](global_step)
        params, opt_states = self.opt.step(params, grads, opt_states, global_step)
        if ema_params is not None:
            ema = lambda x, y: tf1_ema(x, y, self.config["ema_decay"], global_step)
            ema_params = jax.tree_util.tree_map(ema, ema_params, params)
            ema_states = jax.tree_util.tree_map(ema, ema_states, states)
        return {"params": params, "states": states, "opt_states": opt_states,
                "ema_params": ema_params, "ema_states": ema_states, "metrics": metrics}

    def step(self, global_step, rng, *unused_args, **unused_kwargs):
        if self._train_input is None:
            self._initialize_train()
        inputs = next(self._train_input)
        out = self.train_fn(
            params=self._params,
            states=self._state,
            opt_states=self._opt_state,
            inputs=inputs,
            rng=rng,
            global_step=global_step,
            ema_params=self._ema_params,
            ema_states=self._ema_state)
        self._params, self._state = out["params"], out["states"]
        self._opt_state = out["opt_states"]
        self._ema_params, self._ema_state = out["ema_params"], out["ema_states"]
        self.opt.plugin(self._opt_state)
        return jl_utils.get_first(out["metrics"])

    def _build_train_input(self):
        bs_per_device = self.config["train_batch_size_per_device"]
        return load_dataset(1, [jax.local_device_count(), bs_per_device])

    def evaluate(self, global_step, **unused_args):
        metrics = self._eval_epoch(self._params, self._state)
        if self.config["use_ema"]:
            ema_metrics = self._eval_epoch(self._ema_params, self._ema_state)
            metrics.update({f"ema_{key}": val for key, val in ema_metrics.items()})
        return metrics

    def _eval_epoch(self, params, state):
        num_samples = 0.0
        summed_metrics = None
        for inputs in self._build_eval_input():
            num_samples += np.prod(inputs["labels"].shape[:2])
            metrics = self.eval_fn(params, state, inputs)
            metrics = jax.tree_util.tree_map(lambda x: jnp.sum(x[0], axis=0), metrics)
            if summed_metrics is None:
                summed_metrics = metrics
            else:
                summed_metrics = jax.tree_util.tree_map(jnp.add, summed_metrics, metrics)
        mean_metrics = jax.tree_util.tree_map(lambda x: x / num_samples, summed_metrics)
        return jax.device_get(mean_metrics)

    def _eval_fn(self, params, state, inputs):
        logits, _ = self.net.apply(params, state, None, inputs, is_training=False)
        y = jax.nn.one_hot(inputs["labels"], NUM_CLASSES)
        loss = softmax_cross_entropy(logits, y, reduction=None)
        metrics = topk_correct(logits, inputs["labels"], prefix="eval_")
        metrics["eval_loss"] = loss
        return jax.lax.psum(metrics, "i")

    def _build_eval_input(self):
        bs_per_device = self.config["eval_batch_size_per_device"]
        return load_dataset(2, [jax.local_device_count(), bs_per_device],
                            self.config["eval_batches"])
