"""Modelled on scenic/train_lib/classification_trainer.py (@ 4a38d475ee89): module-level
`train_step(train_state, batch, *, flax_model, loss_fn, lr_fn, metrics_fn, config)` and
`eval_step(train_state, batch, *, flax_model, metrics_fn)`; `train()` pmaps
`functools.partial` of each (keyword-only bindings) with `axis_name="batch"` and
`donate_argnums=(0, 1)` / `(1,)`. Inside the train step: the state's rng split, a mixup and
a dropout key bound to the device (`fold_in` of `axis_index`), `lax.pmean` of the grads,
gradient clipping, L2 logs, `lr_fn(jnp.asarray([global_step]))`, psummed metrics. The
optimiser state is built by `jax.jit(tx.init, backend="cpu")`, the state replicated; each
step's `t_logs` are `unreplicate`d, the accumulated metrics `unreplicate_and_get` at
summary time; before each evaluation the batch statistics are synced with the module-level
`pmap_mean`; checkpoints sync then `unreplicate`. Written anew."""
import functools

import jax
import jax.numpy as jnp

import scenic_classification.train_utils as train_utils


def mixup(batch, alpha, rng):
    lam = jax.random.beta(rng, alpha, alpha)
    lam = jnp.maximum(lam, 1.0 - lam)
    batch = dict(batch)
    batch["inputs"] = lam * batch["inputs"] + (1.0 - lam) * jnp.flip(batch["inputs"], 0)
    batch["label"] = lam * batch["label"] + (1.0 - lam) * jnp.flip(batch["label"], 0)
    return batch


def clip_grads(grad_tree, max_norm):
    norm = jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree_util.tree_leaves(grad_tree)))
    factor = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return jax.tree_util.tree_map(lambda g: g * factor, grad_tree)


def train_step(train_state, batch, *, flax_model, loss_fn, lr_fn, metrics_fn, config,
               debug=False):
    training_logs = {}
    new_rng, rng = jax.random.split(train_state.rng)

    if config.get("mixup") and config["mixup"]["alpha"]:
        mixup_rng, rng = jax.random.split(rng, 2)
        mixup_rng = train_utils.bind_rng_to_host_device(
            mixup_rng, axis_name="batch", bind_to=config["mixup"].get("bind_to", "device"))
        batch = mixup(batch, config["mixup"]["alpha"], rng=mixup_rng)

    dropout_rng = train_utils.bind_rng_to_host_device(rng, axis_name="batch", bind_to="device")

    def training_loss_fn(params):
        variables = {"params": params, **train_state.model_state}
        logits, new_model_state = flax_model.apply(
            variables, batch["inputs"], mutable=["batch_stats"], train=True,
            rngs={"dropout": dropout_rng}, debug=debug)
        loss = loss_fn(logits, batch, variables["params"])
        return loss, (new_model_state, logits)

    compute_gradient_fn = jax.value_and_grad(training_loss_fn, has_aux=True)
    (train_cost, (new_model_state, logits)), grad = compute_gradient_fn(train_state.params)
    del train_cost
    grad = jax.lax.pmean(grad, axis_name="batch")
    if config.get("max_grad_norm") is not None:
        grad = clip_grads(grad, config["max_grad_norm"])

    tx = train_state.tx
    updates, new_opt_state = tx.update(grad, train_state.opt_state, train_state.params)
    new_params = jax.tree_util.tree_map(lambda p, u: p + u, train_state.params, updates)

    training_logs["l2_grads"] = jnp.sqrt(
        sum([jnp.vdot(g, g) for g in jax.tree_util.tree_leaves(grad)]))
    ps = jax.tree_util.tree_leaves(new_params)
    training_logs["l2_params"] = jnp.sqrt(sum([jnp.vdot(p, p) for p in ps]))
    us = jax.tree_util.tree_leaves(updates)
    training_logs["l2_updates"] = jnp.sqrt(sum([jnp.vdot(u, u) for u in us]))
    training_logs["learning_rate"] = lr_fn(jnp.asarray([train_state.global_step]))

    metrics = metrics_fn(logits, batch)
    new_train_state = train_state.replace(
        global_step=train_state.global_step + 1, opt_state=new_opt_state,
        params=new_params, model_state=new_model_state, rng=new_rng)
    return new_train_state, metrics, training_logs


def eval_step(train_state, batch, *, flax_model, metrics_fn, debug=False):
    variables = {"params": train_state.params, **train_state.model_state}
    logits = flax_model.apply(variables, batch["inputs"], train=False, mutable=False,
                              debug=debug)
    metrics = metrics_fn(logits, batch)
    return metrics, logits


class Adam:
    """A static optax-like transformation (hashable, kept out of the pytree)."""

    def __init__(self, lr_fn, b1=0.9, b2=0.99, eps=1e-6):
        self.lr_fn, self.b1, self.b2, self.eps = lr_fn, b1, b2, eps

    def init(self, params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}

    def update(self, grads, state, params):
        del params
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: self.b1 * m + (1 - self.b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: self.b2 * v + (1 - self.b2) * g * g, state["nu"], grads)
        lr = self.lr_fn(state["count"])
        c1, c2 = 1 - self.b1 ** count, 1 - self.b2 ** count
        updates = jax.tree_util.tree_map(
            lambda m, v: -lr * (m / c1) / (jnp.sqrt(v / c2) + self.eps), mu, nu)
        return updates, {"count": count, "mu": mu, "nu": nu}


def get_learning_rate_fn(config):
    base, warmup, total = config["base_learning_rate"], config["warmup_steps"], config["num_training_steps"]

    def lr_fn(step):
        step = jnp.asarray(step, jnp.float32)
        return base * jnp.minimum(1.0, (step + 1) / warmup) * jnp.maximum(0.0, 1.0 - step / total)

    return lr_fn


def initialize_model(model_def, input_spec, config, rngs):
    shape, dtype = input_spec[0]
    dummy = jnp.zeros((config["batch_size_per_device"],) + tuple(shape[1:]), dtype)
    variables = jax.jit(model_def.init, backend="cpu")(rngs, dummy)
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(variables["params"]))
    return variables["params"], {"batch_stats": variables["batch_stats"]}, num_params, None


def train(*, rng, config, model_cls, dataset):
    lead_host = jax.process_index() == 0
    model = model_cls(config, dataset.meta_data)

    rng, init_rng = jax.random.split(rng)
    params, model_state, num_trainable_params, gflops = initialize_model(
        model_def=model.flax_model,
        input_spec=[(dataset.meta_data["input_shape"], jnp.float32)],
        config=config, rngs=init_rng)

    lr_fn = get_learning_rate_fn(config)
    tx = Adam(lr_fn)
    opt_state = jax.jit(tx.init, backend="cpu")(params)

    rng, train_rng = jax.random.split(rng)
    train_state = train_utils.TrainState(
        global_step=0, opt_state=opt_state, tx=tx, params=params,
        model_state=model_state, rng=train_rng, metadata={"chrono": {}})
    start_step = train_state.global_step
    train_state = train_state.replace(metadata={})
    train_state = train_utils.replicate(train_state)
    del params

    total_steps = config["num_training_steps"]
    train_step_pmapped = jax.pmap(
        functools.partial(
            train_step,
            flax_model=model.flax_model,
            loss_fn=model.loss_function,
            lr_fn=lr_fn,
            metrics_fn=model.get_metrics_fn("train"),
            config=config,
            debug=False),
        axis_name="batch",
        donate_argnums=(0, 1),
    )
    eval_step_pmapped = jax.pmap(
        functools.partial(
            eval_step,
            flax_model=model.flax_model,
            metrics_fn=model.get_metrics_fn("validation"),
            debug=False),
        axis_name="batch",
        donate_argnums=(1,),
    )
    log_eval_steps = config["log_eval_steps"]
    checkpoint_steps = config["checkpoint_steps"]
    log_summary_steps = config["log_summary_steps"]
    steps_per_eval = config["steps_per_eval"]

    train_metrics, extra_training_logs = [], []
    train_summaries, eval_summaries, checkpoints = [], [], []
    for step in range(start_step + 1, total_steps + 1):
        train_batch = next(dataset.train_iter)
        train_state, t_metrics, t_logs = train_step_pmapped(train_state, train_batch)
        train_metrics.append(t_metrics)
        t_logs = jax.tree_util.tree_map(train_utils.unreplicate, t_logs)
        extra_training_logs.append(t_logs)

        if (step % log_summary_steps == 1) or (step == total_steps):
            train_summaries.append(train_utils.log_train_summary(
                step=step,
                train_metrics=jax.tree_util.tree_map(train_utils.unreplicate_and_get,
                                                     train_metrics),
                extra_training_logs=jax.tree_util.tree_map(jax.device_get,
                                                           extra_training_logs)))
            train_metrics, extra_training_logs = [], []

        if (step % log_eval_steps == 1) or (step == total_steps):
            eval_metrics = []
            train_state = train_utils.sync_model_state_across_replicas(train_state)
            for _ in range(steps_per_eval):
                eval_batch = next(dataset.valid_iter)
                e_metrics, _ = eval_step_pmapped(train_state, eval_batch)
                eval_metrics.append(train_utils.unreplicate_and_get(e_metrics))
            eval_summaries.append(train_utils.log_eval_summary(step=step,
                                                               eval_metrics=eval_metrics))

        if ((step % checkpoint_steps == 1 and step > 1) or (step == total_steps)) and \
                config["checkpoint"]:
            train_state = train_utils.handle_checkpointing(train_state, checkpoints)

    train_utils.barrier_across_hosts()
    del lead_host, num_trainable_params, gflops
    return train_state, train_summaries, eval_summaries, checkpoints
