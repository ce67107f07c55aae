"""The benchmark's speed verdicts (benchmarks/run.py, benchmarks/step_worker.py): a ratio above
1.0 is a MISS only beyond the noise, a tie needs the blocked step to decide, and the bootstrap
interval keeps the pairing that cancels drift. Pure functions: no jax, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from run import global_speed_target, speed_verdict  # noqa: E402
from step_worker import ratio_interval  # noqa: E402


def interval(ratio: float, low: float, high: float) -> dict:
    return {"ratio": ratio, "low": low, "high": high, "pairs": 100}


def test_verdicts_separate_faster_tied_and_slower():
    assert speed_verdict(interval(0.97, 0.95, 0.99)) == "PASS"
    assert speed_verdict(interval(1.0, 0.98, 1.02)) == "PASS"
    assert speed_verdict(interval(1.02, 0.97, 1.06)) == "tie"
    assert speed_verdict(interval(1.02, 1.01, 1.04)) == "MISS"


def test_a_run_tie_is_decided_by_the_blocked_step_and_only_by_it():
    loop = "numpy_batch_training_loop"  # one of GLOBAL_STEP_PROGRAMS
    tie = {loop: interval(1.04, 0.93, 1.12)}
    passed, detail = global_speed_target([loop], tie, {loop: interval(0.97, 0.96, 0.98)})
    assert passed and "decided by the blocked step" in detail
    passed, detail = global_speed_target([loop], tie, {loop: interval(1.01, 0.99, 1.03)})
    assert not passed and f"{loop} step 1.010" in detail
    assert "decided by the blocked step" not in detail
    passed, detail = global_speed_target([loop], tie, {})
    assert not passed and "step not timed" in detail


def test_a_tie_without_a_step_and_any_miss_fail():
    passed, detail = global_speed_target(["collectives_zoo"],
                                         {"collectives_zoo": interval(1.01, 0.95, 1.07)}, {})
    assert not passed and "collectives_zoo run() 1.010" in detail
    loop = "numpy_batch_training_loop"
    passed, _ = global_speed_target([loop], {loop: interval(1.05, 1.02, 1.08)},
                                    {loop: interval(0.9, 0.88, 0.92)})
    assert not passed  # slower beyond the noise: a fast step does not excuse it
    assert global_speed_target(["aliases"], {"aliases": interval(0.04, 0.03, 0.05)}, {})[0]
    assert not global_speed_target([], {}, {})[0]  # nothing timed is not a pass


def test_the_interval_brackets_a_known_ratio_under_shared_drift():
    rng = np.random.default_rng(1)
    drift = np.repeat(rng.uniform(1.0, 4.0, 50), 20)  # slow phases shared by both sides
    original = drift * rng.uniform(0.99, 1.01, drift.size)
    migrated = 0.97 * drift * rng.uniform(0.99, 1.01, drift.size)
    result = ratio_interval(list(original), list(migrated))
    assert 0.95 < result["low"] < result["ratio"] < result["high"] < 1.0
    assert result["pairs"] == drift.size
    same = ratio_interval(list(original), list(original))
    assert same["ratio"] == 1.0 and same["low"] == same["high"] == 1.0
