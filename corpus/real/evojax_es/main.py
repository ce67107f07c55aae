"""Modelled on google/evojax's neuroevolution training (examples/train_*.py building an
`evojax.Trainer`), with the trainer and the simulation manager split in modules as evojax
splits them.

Source: github.com/google/evojax at commit acf5252475e4fbf47e0e3f7994c03de11dd3c4ca
(2024-06-27): evojax/sim_mgr.py (every pmap), evojax/trainer.py, evojax/obs_norm.py,
evojax/policy/mlp.py, evojax/task/base.py, evojax/algo/open_es.py and the examples'
`main()`. The package: this module is the example's `main()` (entry `run()`),
`trainer.py`, `sim_mgr.py`, `obs_norm.py`, `policy.py`, `task.py`, `algo.py`. flax, evosax
and the brax / gym tasks are not used: a 2-D point-mass task, an MLP policy over flat
parameter vectors and a small OpenES solver in plain jax.numpy. All code is written anew.

pmap features kept (see sim_mgr.py): `jax.jit(jax.pmap(partial(rollout, ...),
in_axes=(0, 0, 0, None)))` built in a class `__init__` behind `if num_device > 1`, the
partial binding a nested def that closes over `self` and a task object; the
population, task state and policy state split onto the devices by jitted
`jnp.stack(jnp.split(x, local_device_count()))` helpers, results merged back by jitted
transpose / reshape helpers; a `lax.scan` rollout inside the pmap; no collectives.

Scaled down: population 16, 2 repeats per member, 12 steps per episode, 6 iterations,
8 test episodes (at least one per device).
"""
import numpy as np

from evojax_es.algo import OpenES
from evojax_es.policy import MLPPolicy
from evojax_es.task import PointMassTask
from evojax_es.trainer import Trainer


def main(seed=0):
    train_task = PointMassTask(max_steps=12, test=False)
    test_task = PointMassTask(max_steps=12, test=True)
    policy = MLPPolicy(input_dim=train_task.obs_shape[0], hidden_dim=8,
                       output_dim=train_task.act_shape[0])
    solver = OpenES(pop_size=16, param_size=policy.num_params, seed=seed)
    trainer = Trainer(policy=policy, solver=solver, train_task=train_task,
                      test_task=test_task, max_iter=6, log_interval=2, test_interval=3,
                      n_repeats=2, n_evaluations=8, seed=seed)
    best_score, test_scores, final_states = trainer.run()
    return {
        "best_score": np.asarray(best_score),
        "final_test_scores": test_scores,
        "logs": np.asarray(trainer.logs),
        "tests": np.asarray(trainer.tests),
        "obs_params": np.asarray(trainer.sim_mgr.obs_params),
        "center": np.asarray(solver.best_params),
        "final_pos": np.asarray(final_states.pos),
        "final_steps": np.asarray(final_states.steps),
    }


def run():
    return main()
