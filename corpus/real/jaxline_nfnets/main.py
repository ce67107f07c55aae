"""Modelled on jaxline's training driver (jaxline/train.py) running deepmind-research's
nfnets ImageNet experiment.

Sources: github.com/google-deepmind/jaxline, jaxline/train.py, experiment.py and utils.py
at commit a2308d62191dbe0768ef3676a45d307a3595be82 (2023-12-13); and
github.com/google-deepmind/deepmind-research, nfnets/experiment.py at commit
6fcb84268e74af981ae1496bfc2cb9ba9d701ef2. The package keeps the sources' split: this
module is jaxline's train.py (`train()` and `evaluate()`, entry `run()`), `experiment.py`
the abstract experiment with its default pmapped `train_loop`, `utils.py` jaxline's
device helpers, and `nfnets_experiment.py` the user experiment. absl, ml_collections,
haiku, optax, checkpoint files and writers are not used; the checkpointer is an in-memory
snapshot. All code here is written anew.

pmap features kept:
- in `train()`: `PRNGKey` split into the train-step and init keys, the train-step key
  broadcast to the local devices (`jax.device_put_sharded` of n copies), the experiment's
  `train_loop` (nested pmap updating the per-device step and keys, identity pmap of the
  host ids), a periodic logging action reading the `get_first` scalars, periodic
  in-memory checkpoints (`get_first` of each broadcast attribute), a restore into a fresh
  experiment (`bcast_local_devices` of the snapshot), and `rendezvous()` at the end;
- in `evaluate()`: `jnp.broadcast_to(eval_rng, (local_device_count,) + shape)` then an
  inline `jax.pmap(functools.partial(utils.specialize_rng_host_device, axis_name="i",
  mode=...), axis_name="i")(eval_rng, host_id_devices)` with `host_id_devices` None;
  the global step broadcast with `bcast_local_devices(jnp.asarray(step))`;
- the experiment's own pmaps (bound methods with `donate_argnums`, keyword-only calls,
  inline init pmap of a lambda) as described in `nfnets_experiment.py`.

Scaled down: 10-feature synthetic data in 5 classes, 4 examples per device, 9 steps,
logging every 3 and checkpointing every 4 steps, 2 eval batches of 3 per device.

The original needs jax 0.4.38 (`jax.device_put_sharded` is gone from jax 0.10).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxline_nfnets.nfnets_experiment as nfnets_experiment
import jaxline_nfnets.utils as utils


class InMemoryCheckpointer:
    def __init__(self):
        self._snapshots = []

    def save(self, global_step, experiment_module):
        self._snapshots.append((global_step, experiment_module.snapshot_state()))

    def restore(self, experiment_module):
        global_step, snapshot = self._snapshots[-1]
        experiment_module.restore_from_snapshot(snapshot)
        return global_step

    def latest(self):
        return self._snapshots[-1]


class PeriodicAction:
    def __init__(self, fn, interval):
        self._fn, self._interval = fn, interval

    def __call__(self, global_step, scalar_outputs):
        if global_step % self._interval == 0:
            self._fn(global_step, scalar_outputs)


def train(experiment_class, config, checkpointer):
    rng = jax.random.PRNGKey(config["random_seed"])
    train_step_rng, init_rng = jax.random.split(rng)
    experiment = experiment_class("train", init_rng=init_rng, **config["experiment_kwargs"])

    state = {"global_step": 0}
    state["train_step_rng"] = experiment.initialize_train_step_rng(train_step_rng)

    logged = []

    def log_outputs(global_step, scalar_values):
        logged.append([global_step] + [float(scalar_values[k]) for k in sorted(scalar_values)])

    periodic_actions = (
        PeriodicAction(log_outputs, config["log_tensors_interval"]),
        PeriodicAction(lambda step, _: checkpointer.save(step, experiment),
                       config["save_checkpoint_interval"]),
    )
    experiment.train_loop(config, state, periodic_actions)
    checkpointer.save(state["global_step"], experiment)
    utils.rendezvous()
    return experiment, state, logged


def evaluate(experiment_class, config, checkpointer):
    eval_rng = jax.random.PRNGKey(config["random_seed"])
    experiment = experiment_class("eval", init_rng=eval_rng, **config["experiment_kwargs"])
    global_step = checkpointer.restore(experiment)

    eval_rng = jnp.broadcast_to(eval_rng, (jax.local_device_count(),) + eval_rng.shape)
    host_id_devices = utils.host_id_devices_for_rng(config["random_mode_eval"])
    eval_rng = jax.pmap(functools.partial(
        utils.specialize_rng_host_device, axis_name="i",
        mode=config["random_mode_eval"]), axis_name="i")(eval_rng, host_id_devices)

    global_step_devices = utils.bcast_local_devices(jnp.asarray(global_step))
    scalar_values = experiment.evaluate(global_step=global_step_devices, rng=eval_rng)
    return scalar_values, eval_rng


def run():
    config = nfnets_experiment.get_config()
    checkpointer = InMemoryCheckpointer()
    experiment, state, logged = train(nfnets_experiment.Experiment, config, checkpointer)
    scalars, eval_rng = evaluate(nfnets_experiment.Experiment, config, checkpointer)
    snapshots = [step for step, _ in checkpointer._snapshots]
    _, last = checkpointer.latest()
    return {
        "logged": np.asarray(logged),
        "snapshot_steps": np.asarray(snapshots),
        "eval": np.asarray([scalars[k] for k in sorted(scalars)]),
        "eval_rng": np.asarray(eval_rng),
        "train_step_rng": np.asarray(state["train_step_rng"]),
        "params_w": np.asarray(last["params"]["logits"]["w"]),
        "ema_w": np.asarray(last["ema_params"]["linear"]["w"]),
        "opt_state_b": np.asarray(last["opt_state"]["linear"]["b"]),
        "bn_mean": np.asarray(experiment._state["mean"]),
    }
