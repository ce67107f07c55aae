"""Modelled on google-research/scenic's classification trainer (scenic/main.py handing a
model and a dataset to scenic/train_lib/classification_trainer.py).

Source: github.com/google-research/scenic at commit
4a38d475ee89cb821078c0e2bf2065ee030e1535 (2026-07-02; the classification trainer still
pmaps): scenic/main.py, scenic/train_lib/classification_trainer.py,
scenic/train_lib/train_utils.py, scenic/model_lib/base_models/classification_model.py and
model_utils.py, scenic/dataset_lib/dataset_utils.py. The package keeps that split: this
module is main.py (config, model class and dataset wiring, entry `run()`),
`classification_trainer.py` the steps and `train()`, `train_utils.py` the state and the
replica helpers, `classification_model.py` the model and its psummed metrics,
`dataset_utils.py` the sharding and prefetching. flax, optax, tfds, ml_collections, clu and
checkpoint files are not used (a plain-jax.numpy model with batch statistics, a
hand-written Adam, seeded numpy data, in-memory checkpoints). All code is written anew.

pmap features kept: see the module docstrings; in short, `jax.pmap(functools.partial(
train_step, flax_model=..., loss_fn=..., lr_fn=..., metrics_fn=..., config=...),
axis_name="batch", donate_argnums=(0, 1))` of a module-level step in another module,
an eval pmap with `donate_argnums=(1,)`, a pytree-dataclass state with a static optimiser
replicated with `jax.device_put_replicated`, device-bound keys via `fold_in(axis_index)`,
`lax.pmean` grads, `lax.psum` metrics from the model module, a module-level
`@partial(jax.pmap, axis_name="x")` pmean syncing batch statistics, `unreplicate` /
`unreplicate_and_get` reads, and batches placed with `jax.device_put_sharded`.

Scaled down: 6x6x1 synthetic images in 4 classes, 4 per device (eval 2 per device), 7
steps, train summaries every 3, evaluation every 3 steps over 2 batches, checkpoints every 4.

The original needs jax 0.4.38 (`jax.device_put_replicated` / `jax.device_put_sharded`).
"""
import jax
import numpy as np

import scenic_classification.classification_model as classification_model
import scenic_classification.classification_trainer as classification_trainer
import scenic_classification.dataset_utils as dataset_utils


def get_config():
    return {
        "rng_seed": 42,
        "batch_size_per_device": 4,
        "eval_batch_size_per_device": 2,
        "num_training_steps": 7,
        "log_summary_steps": 3,
        "log_eval_steps": 3,
        "checkpoint_steps": 4,
        "steps_per_eval": 2,
        "checkpoint": True,
        "base_learning_rate": 0.05,
        "warmup_steps": 2,
        "max_grad_norm": 1.0,
        "l2_decay_factor": 1e-4,
        "mixup": {"alpha": 0.4, "bind_to": "device"},
        "hidden": 16,
        "dropout_rate": 0.1,
    }


def main(rng, config):
    n = jax.local_device_count()
    dataset = dataset_utils.get_dataset(config["batch_size_per_device"] * n,
                                        config["eval_batch_size_per_device"] * n)
    return classification_trainer.train(
        rng=rng, config=config, model_cls=classification_model.ClassificationModel,
        dataset=dataset)


def run():
    config = get_config()
    rng = jax.random.PRNGKey(config["rng_seed"])
    train_state, train_summaries, eval_summaries, checkpoints = main(rng, config)

    def rows(summaries):
        return np.asarray([[s[k] for k in sorted(s)] for s in summaries], np.float64)

    final = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], train_state))
    return {
        "train_summaries": rows(train_summaries),
        "eval_summaries": rows(eval_summaries),
        "checkpoint_steps": np.asarray([int(c[0]) for c in checkpoints]),
        "checkpoint_head": np.stack([c[1]["head"] for c in checkpoints]),
        "checkpoint_bn_mean": np.stack([c[2]["batch_stats"]["mean"] for c in checkpoints]),
        "final_dense": np.asarray(final.params["dense"]),
        "final_opt_count": np.asarray(final.opt_state["count"]),
        "per_device_rng": np.asarray(train_state.rng),
        "per_device_bn_var": np.asarray(train_state.model_state["batch_stats"]["var"]),
    }
