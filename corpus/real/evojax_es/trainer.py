"""Modelled on evojax/trainer.py (google/evojax @ acf5252475e4): the `Trainer` wires the
solver, the policy, the tasks and an `ObsNormalizer` into a `SimManager`, then loops
ask -> `sim_mgr.eval_params(params, test=False)` -> tell, logging `np.array(scores)`
statistics every `log_interval` and testing `solver.best_params` every `test_interval`.
No device code of its own: every pmap lives in sim_mgr.py. Written anew."""
import numpy as np

from evojax_es.obs_norm import ObsNormalizer
from evojax_es.sim_mgr import SimManager


class Trainer:
    def __init__(self, policy, solver, train_task, test_task, max_iter=6, log_interval=2,
                 test_interval=3, n_repeats=2, test_n_repeats=1, n_evaluations=8, seed=0,
                 normalize_obs=True):
        self._max_iter = max_iter
        self._log_interval = log_interval
        self._test_interval = test_interval
        self._obs_normalizer = ObsNormalizer(obs_shape=train_task.obs_shape,
                                             dummy=not normalize_obs)
        self.solver = solver
        self.sim_mgr = SimManager(
            n_repeats=n_repeats, test_n_repeats=test_n_repeats, pop_size=solver.pop_size,
            n_evaluations=n_evaluations, policy_net=policy, train_vec_task=train_task,
            valid_vec_task=test_task, seed=seed, obs_normalizer=self._obs_normalizer)
        self.logs = []
        self.tests = []

    def run(self):
        best_score = -float("Inf")
        for i in range(self._max_iter):
            params = self.solver.ask()
            scores, _ = self.sim_mgr.eval_params(params=params, test=False)
            self.solver.tell(fitness=scores)
            if i > 0 and i % self._log_interval == 0:
                scores = np.array(scores)
                self.logs.append([i, scores.max(), scores.mean(), scores.min(), scores.std()])
            if i > 0 and i % self._test_interval == 0:
                test_scores, _ = self.sim_mgr.eval_params(params=self.solver.best_params,
                                                          test=True)
                score = float(np.array(test_scores).mean())
                self.tests.append(score)
                best_score = max(best_score, score)
        test_scores, final_states = self.sim_mgr.eval_params(
            params=self.solver.best_params, test=True)
        return best_score, np.array(test_scores), final_states
