"""Modelled on scenic/train_lib/train_utils.py (google-research/scenic @ 4a38d475ee89):
`TrainState` (a pytree dataclass whose optimiser `tx` is static, as flax's
`struct.field(pytree_node=False)`), a module-level `@functools.partial(jax.pmap,
axis_name="x")` `pmap_mean` used by `sync_model_state_across_replicas` on the batch
statistics, `unreplicate_and_get` (`device_get` of `x[0]`), `bind_rng_to_host_device`
(`fold_in` of `lax.axis_index`, called inside the trainer's pmap), flax-style `replicate`
(`jax.device_put_replicated`), the train / eval summaries (stacked `(value, normalizer)`
pairs) and the checkpoint hook (sync, then `unreplicate`). Written anew."""
import dataclasses
import functools
from typing import Any, Optional

import jax
import numpy as np


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["opt_state", "params", "global_step", "model_state", "rng",
                                "metadata"],
                   meta_fields=["tx"])
@dataclasses.dataclass(frozen=True)
class TrainState:
    tx: Optional[Any] = None
    opt_state: Optional[Any] = None
    params: Optional[Any] = dataclasses.field(default_factory=dict)
    global_step: Optional[int] = 0
    model_state: Optional[Any] = dataclasses.field(default_factory=dict)
    rng: Optional[Any] = None
    metadata: Optional[Any] = None

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)


def replicate(tree, devices=None):
    devices = devices or jax.local_devices()
    return jax.device_put_replicated(tree, devices)


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


@functools.partial(jax.pmap, axis_name="x")
def pmap_mean(x):
    return jax.lax.pmean(x, "x")


def sync_model_state_across_replicas(train_state):
    if jax.tree_util.tree_leaves(train_state.model_state):
        new_model_state = dict(train_state.model_state)
        new_model_state["batch_stats"] = pmap_mean(train_state.model_state["batch_stats"])
        return train_state.replace(model_state=new_model_state)
    return train_state


def unreplicate_and_get(x):
    return jax.device_get(unreplicate(x))


def bind_rng_to_host_device(rng, axis_name, bind_to=None):
    """Specialises a key to the host or device (call inside a pmap)."""
    if bind_to is None:
        return rng
    if bind_to == "host":
        return jax.random.fold_in(rng, jax.process_index())
    if bind_to == "device":
        return jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
    raise ValueError("`bind_to` should be one of the `[None, 'host', 'device']`")


def stack_forest(forest):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *forest)


def normalize_metrics_summary(metrics_summary):
    """Each metric is a stack of (value, normalizer) pairs: sum the values over the sum."""
    return {key: float(np.sum(val[0]) / np.sum(val[1])) for key, val in metrics_summary.items()}


def log_train_summary(step, train_metrics, extra_training_logs):
    train_metrics = stack_forest(train_metrics)
    summary = {"train_" + k: v for k, v in normalize_metrics_summary(train_metrics).items()}
    extra = stack_forest(extra_training_logs)
    summary.update({k: float(np.mean(v)) for k, v in extra.items()})
    return dict(summary, step=step)


def log_eval_summary(step, eval_metrics):
    eval_metrics = stack_forest(eval_metrics)
    summary = {"valid_" + k: v for k, v in normalize_metrics_summary(eval_metrics).items()}
    return dict(summary, step=step)


def barrier_across_hosts():
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("barrier")


def handle_checkpointing(train_state, checkpoints):
    train_state = sync_model_state_across_replicas(train_state)
    if jax.process_index() == 0:
        unrep_train_state = unreplicate(train_state)
        checkpoints.append(jax.device_get((unrep_train_state.global_step,
                                           unrep_train_state.params,
                                           unrep_train_state.model_state)))
    return train_state
