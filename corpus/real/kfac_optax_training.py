"""Modelled on kfac-jax's examples training stack: the Optax wrapper class and the
supervised experiment class that drives it.

Sources: github.com/google-deepmind/kfac-jax, examples/optax_wrapper.py,
examples/training.py and kfac_jax/_src/utils/parallel.py at commit
c0d25ade766a88c0d0534cac7228d56f24fac967 (2025-12-17, the last before "[kfac_jax] Prepare
for `jax_pmap_shmap_merge=True`"). jaxline, ml_collections, optax, haiku and the
preconditioner are not used: the network is a two-layer MLP with dropout in plain
jax.numpy, the optimiser a hand-written optax-style momentum SGD (an `init` / `update`
pair), the data seeded numpy. All code here is written anew.

pmap features kept:
- module-level pmaps of lambdas in the utilities: `pmap_mean` (`lax.pmean` over "i") read
  back by `get_first` (index `[0]` unless the leaf is a scalar), `p_split` (a bare pmap of
  a key split returning a tuple); `replicate_all_local_devices` =
  `jax.device_put_replicated(obj, devices=jax.local_devices())`;
- `pmean_if_pmap`: a `lax.pmean` only when the axis name is bound (looked up in the
  tracer's axis names), called inside the mapped step;
- the Optax wrapper class building its pmaps in `__init__` from a bound method and two
  lambdas: `jax.pmap(self._step, axis_name=..., donate_argnums=list(range(5)),
  in_axes=(0,) * 5 + (None,))` (the global step a host int, broadcast), `jax.pmap(lambda
  p, *_: State(...), axis_name=...)` for `init`, and `jax.pmap(lambda rng, num:
  tuple(jax.random.split(rng, num)), axis_name=..., static_broadcasted_argnums=1)`;
  `step()` splits the per-device key, pulls the batch from the iterator and calls the
  donating step with `func_state=None`;
- the experiment class holding `self.params_init = jax.pmap(init_fn, axis_name=...)`,
  `self.train_batch_pmap` / `self.eval_batch_pmap` (pmaps of bound methods); state
  initialised from the replicated init key split by `p_split`; the optimiser's `step`
  called with keyword arguments only; stats averaged with `tree_map(partial(jnp.mean,
  axis=0))`; evaluation splitting keys per batch, summing pmapped stats on the host side,
  and a `get_mean` of the result; parameter counts through `get_first`.

Scaled down: 8-feature synthetic data in 4 classes, 4 examples per device, 6 training
steps, 3 eval batches; no Polyak averaging, schedule-free or preconditioner branches.
"""
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

NUM_CLASSES = 4
FEATURES = 8
HIDDEN = 16


# ----------------------------------------------------------------- parallel utilities

def _axis_names():
    try:
        from jax.extend.core import unsafe_get_axis_names_DO_NOT_USE as names
    except ImportError:
        from jax.core import unsafe_get_axis_names_DO_NOT_USE as names
    return names()


def in_pmap(axis_name):
    if axis_name is None:
        return False
    return axis_name in _axis_names()


def pmean_if_pmap(obj, axis_name):
    return lax.pmean(obj, axis_name) if in_pmap(axis_name) else obj


pmap_mean = jax.pmap(lambda x: lax.pmean(x, "i"), axis_name="i")


def is_scalar(x):
    return isinstance(x, (float, int)) or (isinstance(x, jax.Array) and not x.shape)


def index_if_not_scalar(value, index=0):
    return value if is_scalar(value) else value[index]


def get_first(obj):
    return jax.tree_util.tree_map(index_if_not_scalar, obj)


def get_mean(obj):
    return get_first(pmap_mean(obj))


def replicate_all_local_devices(obj):
    if not jax.tree_util.tree_leaves(obj):
        return obj
    return jax.device_put_replicated(obj, devices=jax.local_devices())


p_split = jax.pmap(lambda key: tuple(jax.random.split(key)))


# ----------------------------------------------------------------- optax stand-ins

class GradientTransformation(NamedTuple):
    init: Callable
    update: Callable


def momentum_sgd(learning_rate, momentum=0.9):
    def init(params):
        return {"trace": jax.tree_util.tree_map(jnp.zeros_like, params),
                "count": jnp.zeros((), jnp.int32)}

    def update(grads, state, params=None):
        del params
        trace = jax.tree_util.tree_map(lambda t, g: momentum * t + g, state["trace"], grads)
        lr = learning_rate(state["count"])
        updates = jax.tree_util.tree_map(lambda t: -lr * t, trace)
        return updates, {"trace": trace, "count": state["count"] + 1}

    return GradientTransformation(init, update)


def apply_updates(params, updates):
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)


def global_norm(tree):
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))


def make_func_args(params, func_state, rng, batch, has_state, has_rng):
    args = [params]
    if has_state:
        args.append(func_state)
    if has_rng:
        args.append(rng)
    args.append(batch)
    return tuple(args)


def extract_func_outputs(out, has_aux, has_state):
    if not has_aux and not has_state:
        return out, None, None
    loss, other = out
    if has_aux and has_state:
        state, aux = other
    elif has_aux:
        state, aux = None, other
    else:
        state, aux = other, None
    return loss, state, aux


# ----------------------------------------------------------------- the Optax wrapper

class OptaxAndPreconditionState(NamedTuple):
    optax_state: Any
    precond_state: Any = None


class OptaxWrapper:
    """Gives an optax-style optimiser the K-FAC optimiser's pmapped interface."""

    def __init__(self, value_and_grad_func, value_func_has_aux, value_func_has_state,
                 value_func_has_rng, learning_rate, optax_optimizer_ctor,
                 batch_process_func=lambda x: x, include_norms_in_stats=False,
                 pmap_axis_name="kfac_axis"):
        self._value_and_grad_func = value_and_grad_func
        self._value_func_has_aux = value_func_has_aux
        self._value_func_has_state = value_func_has_state
        self._value_func_has_rng = value_func_has_rng
        if not callable(learning_rate):
            self._learning_rate = lambda _: learning_rate
        else:
            self._learning_rate = learning_rate
        self._optax_optimizer = optax_optimizer_ctor(self._learning_rate)
        self._include_norms_in_stats = include_norms_in_stats
        self._batch_process_func = batch_process_func or (lambda x: x)
        self.pmap_axis_name = pmap_axis_name
        self._pmap_step = jax.pmap(
            self._step,
            axis_name=self.pmap_axis_name,
            donate_argnums=list(range(5)),
            in_axes=(0,) * 5 + (None,),
        )
        self._pmap_init = jax.pmap(
            lambda p, *_: OptaxAndPreconditionState(self._optax_optimizer.init(p)),
            axis_name=self.pmap_axis_name,
        )
        self._pmap_rng_split = jax.pmap(
            lambda rng, num: tuple(jax.random.split(rng, num)),
            axis_name=self.pmap_axis_name,
            static_broadcasted_argnums=1,
        )

    def init(self, params, rng, batch, func_state=None):
        return self._pmap_init(params, rng, batch, func_state)

    def _step(self, params, state, rng, batch, func_state=None, global_step=None):
        rng_func, _ = jax.random.split(rng)
        batch = self._batch_process_func(batch)
        func_args = make_func_args(params, func_state, rng_func, batch,
                                   has_state=self._value_func_has_state,
                                   has_rng=self._value_func_has_rng)
        out, grads = self._value_and_grad_func(*func_args)
        loss, new_func_state, stats = extract_func_outputs(
            out, has_aux=self._value_func_has_aux, has_state=self._value_func_has_state)
        loss, stats, grads = pmean_if_pmap((loss, stats, grads), axis_name=self.pmap_axis_name)
        stats = stats or {}
        stats["loss"] = loss

        updates, new_optax_state = self._optax_optimizer.update(grads, state.optax_state, params)
        new_state = OptaxAndPreconditionState(new_optax_state, state.precond_state)
        new_params = apply_updates(params, updates)

        batch_size = jax.tree_util.tree_leaves(batch)[0].shape[0]
        stats["step"] = global_step + 1
        stats["batch_size"] = batch_size * jax.device_count()
        stats["data_seen"] = stats["step"] * stats["batch_size"]
        stats["learning_rate"] = self._learning_rate(global_step)
        if self._include_norms_in_stats:
            stats["grad_norm"] = global_norm(grads)
            stats["update_norm"] = global_norm(updates)
            stats["param_norm"] = global_norm(params)
        if self._value_func_has_state:
            return new_params, new_state, new_func_state, stats
        return new_params, new_state, stats

    def step(self, params, state, rng, data_iterator, func_state=None, global_step_int=None):
        """A step with the K-FAC optimiser's interface."""
        _, rng_step = self._pmap_rng_split(rng, 2)
        batch = next(data_iterator)
        return self._pmap_step(params, state, rng_step, batch, func_state, global_step_int)


# ----------------------------------------------------------------- model and data

def init_parameters_func(rng, batch):
    k1, k2 = jax.random.split(rng)
    del batch
    return {"hidden": {"w": jax.random.normal(k1, (FEATURES, HIDDEN)) / np.sqrt(FEATURES),
                       "b": jnp.zeros((HIDDEN,))},
            "logits": {"w": jax.random.normal(k2, (HIDDEN, NUM_CLASSES)) * 0.3,
                       "b": jnp.zeros((NUM_CLASSES,))}}


def model_loss_func(params, rng, batch, is_training, drop_rate=0.25, l2_reg=1e-3):
    h = jax.nn.tanh(batch["images"] @ params["hidden"]["w"] + params["hidden"]["b"])
    if is_training:
        keep = jax.random.bernoulli(rng, 1.0 - drop_rate, h.shape)
        h = jnp.where(keep, h / (1.0 - drop_rate), 0.0)
    logits = h @ params["logits"]["w"] + params["logits"]["b"]
    labels = jax.nn.one_hot(batch["labels"], NUM_CLASSES)
    loss = -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))
    reg = 0.5 * sum(jnp.sum(jnp.square(p["w"])) for p in params.values())
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["labels"])
    return loss + l2_reg * reg, {"accuracy": accuracy, "l2_reg_val": reg}


def make_dataset(seed, per_device, num_batches=None):
    centres = np.random.RandomState(11).normal(scale=1.5, size=(NUM_CLASSES, FEATURES))
    rng = np.random.RandomState(seed)
    n = jax.local_device_count()
    produced = 0
    while num_batches is None or produced < num_batches:
        labels = rng.randint(0, NUM_CLASSES, size=(n, per_device))
        images = centres[labels] + rng.normal(size=(n, per_device, FEATURES))
        yield {"images": images.astype(np.float32), "labels": labels.astype(np.int32)}
        produced += 1


# ----------------------------------------------------------------- the experiment

class SupervisedExperiment:
    """The examples' experiment: owns the pmapped model functions and the optimiser."""

    def __init__(self, init_rng, config, pmap_axis_name="kfac_axis"):
        self.init_rng, seed_rng = jax.random.split(init_rng)
        self.seed_rng = seed_rng
        self.config = config
        self.has_aux = True
        self.has_rng = True
        self.has_func_state = False
        self.pmap_axis_name = pmap_axis_name

        self.params_init = jax.pmap(init_parameters_func, axis_name=self.pmap_axis_name)
        self.model_loss_func = model_loss_func
        self.train_model_func = functools.partial(self.model_loss_func, is_training=True)
        self.eval_model_func = functools.partial(self.model_loss_func, is_training=False)
        self.train_batch_pmap = jax.pmap(self._train_batch, axis_name=self.pmap_axis_name)
        self.eval_batch_pmap = jax.pmap(self._eval_batch, axis_name=self.pmap_axis_name)

        self._train_input, self._init_batch = None, None
        self._params, self._state, self._opt_state = None, None, None
        self._python_step = 0
        self._num_parameters = 0
        self.optimizer = self.create_optimizer()

    @property
    def train_inputs(self):
        if self._train_input is None:
            self._train_input = make_dataset(int(self.seed_rng[0]) % 1000,
                                             self.config["per_device"])
        return self._train_input

    @property
    def init_batch(self):
        if self._init_batch is None:
            self._init_batch = next(make_dataset(3, self.config["per_device"]))
        return self._init_batch

    def create_optimizer(self):
        steps = self.config["steps"]

        def schedule(count):
            return self.config["lr"] * (1.0 - 0.5 * count / steps)

        return OptaxWrapper(
            value_and_grad_func=jax.value_and_grad(self.train_model_func, has_aux=True),
            value_func_has_aux=self.has_aux,
            value_func_has_state=self.has_func_state,
            value_func_has_rng=self.has_rng,
            learning_rate=schedule,
            optax_optimizer_ctor=momentum_sgd,
            include_norms_in_stats=True,
            pmap_axis_name=self.pmap_axis_name,
        )

    def maybe_initialize_state(self):
        if self._params is not None:
            return
        init_rng = replicate_all_local_devices(self.init_rng)
        params_rng, optimizer_rng = p_split(init_rng)
        self._params = self.params_init(params_rng, self.init_batch)
        self._opt_state = self.optimizer.init(self._params, optimizer_rng, self.init_batch,
                                              self._state)
        self._state = ()
        for var in jax.tree_util.tree_leaves(self._params):
            var = get_first(var)
            self._num_parameters += var.size

    def _train_batch(self, params, func_state, rng, batch):
        func_args = make_func_args(params=params, func_state=func_state, rng=rng, batch=batch,
                                   has_state=self.has_func_state, has_rng=self.has_rng)
        return extract_func_outputs(self.train_model_func(*func_args),
                                    has_aux=self.has_aux, has_state=self.has_func_state)

    def _eval_batch(self, global_step, params, func_state, opt_state, rng, batch):
        del global_step
        func_args = make_func_args(params=params, func_state=func_state, rng=rng, batch=batch,
                                   has_state=self.has_func_state, has_rng=self.has_rng)
        loss, stats = self.eval_model_func(*func_args)
        stats["loss"] = loss
        stats["opt_count"] = opt_state.optax_state["count"].astype(jnp.float32)
        return stats

    def train_step(self, global_step, rng):
        result = self.optimizer.step(
            params=self._params,
            state=self._opt_state,
            rng=rng,
            data_iterator=self.train_inputs,
            func_state=self._state if self.has_func_state else None,
            global_step_int=self._python_step,
        )
        self._params, self._opt_state, stats = result
        if "aux" in stats:
            stats.update(stats.pop("aux", {}))
        stats = jax.tree_util.tree_map(functools.partial(jnp.mean, axis=0), stats)
        self._python_step += 1
        stats["progress"] = self._python_step / self.config["steps"]
        return stats

    def run_evaluation(self, global_step, rng):
        summed, count = None, 0
        for batch in make_dataset(17, self.config["per_device"], self.config["eval_batches"]):
            key, rng = p_split(rng)
            stats = self.eval_batch_pmap(global_step, self._params, self._state,
                                         self._opt_state, key, batch)
            summed = stats if summed is None else jax.tree_util.tree_map(jnp.add, summed, stats)
            count += 1
        averaged = jax.tree_util.tree_map(lambda x: x / count, summed)
        return get_mean(averaged)


def run():
    config = {"per_device": 4, "steps": 6, "lr": 0.2, "eval_batches": 3}
    experiment = SupervisedExperiment(jax.random.PRNGKey(5), config)
    experiment.maybe_initialize_state()

    rng = replicate_all_local_devices(jax.random.PRNGKey(9))
    global_step = replicate_all_local_devices(jnp.asarray(0))
    losses, accuracies, steps = [], [], []
    for _ in range(config["steps"]):
        step_rng, rng = p_split(rng)
        stats = experiment.train_step(global_step, step_rng)
        losses.append(float(stats["loss"]))
        accuracies.append(float(stats["accuracy"]))
        steps.append(float(stats["step"]))
    eval_stats = experiment.run_evaluation(global_step, rng)
    params = jax.device_get(get_first(experiment._params))
    return {
        "losses": np.asarray(losses),
        "accuracies": np.asarray(accuracies),
        "steps": np.asarray(steps),
        "eval": np.asarray([eval_stats[k] for k in sorted(eval_stats)]),
        "hidden_w": np.asarray(params["hidden"]["w"]),
        "logits_b": np.asarray(params["logits"]["b"]),
        "trace_b": np.asarray(experiment._opt_state.optax_state["trace"]["logits"]["b"]),
        "num_parameters": np.asarray(experiment._num_parameters),
    }
