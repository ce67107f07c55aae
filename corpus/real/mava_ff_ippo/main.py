"""Modelled on instadeepai/Mava's feed-forward independent-PPO system in the Anakin
architecture (the whole loop on device, pmapped over devices, vmapped over an update batch).

Source: github.com/instadeepai/Mava at commit 01ece2b9403cfb29b6cc68837112f08e5ff15a4f:
mava/systems/ppo/ff_ippo.py (the learner and `run_experiment`), mava/evaluator.py (the
evaluator pmaps) and mava/utils/jax_utils.py (unreplicate helpers). The package keeps that
split: this module is the hydra entry point (config, entry `run()`), `ff_ippo.py` the
system, `evaluator.py` the evaluator factory, `jax_utils.py` the helpers, and `env.py` a
stand-in environment. All code is written anew.

pmap features kept (see the module docstrings): `jax.pmap(learn, axis_name="device")` of a
function that scans a `jax.vmap(..., axis_name="batch")` update step, with `lax.pmean`
over "batch" and then over "device" (two axis names, one pmap); learner state shaped
(devices, update batch, envs, ...): environment states reshaped from one vmapped reset,
params / optimiser states / key `jnp.broadcast_to` the update batch then replicated with
`jax.device_put_replicated(..., jax.devices())`; `n_devices = len(jax.devices())`;
evaluator pmaps (`axis_name="device"`, no collective) built in a factory in another
module and called with `x[:, 0]`-unreplicated params and per-device keys; `x[0, 0]`
checkpoint reads; host-side boolean masking of pmap outputs.

Scaled down: 2 agents, 2 update-batch copies x 2 envs per device, rollouts of 4 steps,
2 PPO epochs of 2 minibatches, 4 updates in 2 evaluation rounds, 8 evaluation episodes.

The original needs jax 0.4.38 (`jax.device_put_replicated` is gone from jax 0.10).
"""
import numpy as np

from mava_ff_ippo.ff_ippo import run_experiment


def get_config():
    return {
        "seed": 42, "num_envs": 2, "update_batch_size": 2, "rollout_length": 4,
        "ppo_epochs": 2, "num_minibatches": 2, "num_updates": 4, "num_evaluation": 2,
        "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
        "actor_lr": 3e-3, "critic_lr": 3e-3, "max_grad_norm": 0.5,
        "num_eval_episodes": 8, "evaluation_greedy": False, "absolute_metric": True,
    }


def run():
    eval_performance, learner_state, log = run_experiment(get_config())
    return {
        "eval_performance": np.asarray(eval_performance),
        "train": np.asarray(log["train"]),
        "act": np.asarray(log["act"]),
        "eval": np.asarray(log["eval"]),
        "absolute": np.asarray(log["absolute"]),
        "checkpoints": np.stack(log["checkpoints"]),
        "actor_head": np.asarray(learner_state.params.actor_params["head"]),
        "keys": np.asarray(learner_state.key),
    }
