"""Modelled on jaxline/experiment.py (google-deepmind/jaxline @ a2308d62191d): the abstract
experiment whose default `train_loop` holds a nested `@functools.partial(jax.pmap,
axis_name="i")` `next_device_state` (increments the per-device global step and splits the
per-device rng, specialising the step key per host and device), moves the host ids to the
devices with an identity `jax.pmap(lambda x: x)`, and calls the subclass's `step`;
checkpoint snapshots take `get_first` of the broadcast attributes and restore them with
`bcast_local_devices`. Written anew."""
import functools

import jax
import numpy as np

import jaxline_nfnets.utils as utils


class AbstractExperiment:
    CHECKPOINT_ATTRS = {}
    NON_BROADCAST_CHECKPOINT_ATTRS = {}

    def __init__(self, mode, init_rng=None):
        self.mode = mode
        self.init_rng = init_rng

    def initialize_train_step_rng(self, rng):
        """The key broadcast to all local devices (pmap-style data parallelism)."""
        return utils.bcast_local_devices(rng)

    def should_run_step(self, global_step, config):
        return global_step < config["training_steps"]

    def train_loop(self, config, state, periodic_actions):
        @functools.partial(jax.pmap, axis_name="i")
        def next_device_state(global_step, rng, host_id):
            """Updates device global step and rng in one pmap fn to reduce overhead."""
            global_step += 1
            step_rng, state_rng = tuple(jax.random.split(rng))
            step_rng = utils.specialize_rng_host_device(
                step_rng, host_id, axis_name="i", mode=config["random_mode_train"])
            return global_step, (step_rng, state_rng)

        global_step_devices = np.broadcast_to(state["global_step"] - 1,
                                              [jax.local_device_count()])
        host_id_devices = utils.host_id_devices_for_rng(config["random_mode_train"])
        if host_id_devices is not None:
            host_id_devices = jax.pmap(lambda x: x)(host_id_devices)

        while self.should_run_step(state["global_step"], config):
            global_step_devices, (step_key, state["train_step_rng"]) = next_device_state(
                global_step_devices, state["train_step_rng"], host_id_devices)
            scalar_outputs = self.step(global_step=global_step_devices, rng=step_key)
            state["global_step"] += 1
            for action in periodic_actions:
                action(state["global_step"], scalar_outputs)

    def snapshot_state(self):
        snapshot = {}
        for attr_name, chk_name in self.CHECKPOINT_ATTRS.items():
            snapshot[chk_name] = utils.get_first(getattr(self, attr_name))
        for attr_name, chk_name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items():
            snapshot[chk_name] = getattr(self, attr_name)
        return snapshot

    def restore_from_snapshot(self, snapshot_state):
        for attr_name, chk_name in self.CHECKPOINT_ATTRS.items():
            setattr(self, attr_name, utils.bcast_local_devices(snapshot_state[chk_name]))
        for attr_name, chk_name in self.NON_BROADCAST_CHECKPOINT_ATTRS.items():
            setattr(self, attr_name, snapshot_state[chk_name])
