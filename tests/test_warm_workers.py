"""Warm workers (equivalence/warm_workers.py): a run forked from an interpreter that has
imported jax is the run a fresh worker would have made, apart from every other run, and
nothing outlives the harness. Real runs on fake CPU devices (current JAX)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from equivalence import warm_workers
from equivalence.runner import run_entry

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = '''
import os
import jax
import jax.numpy as jnp
import numpy as np


def run():
    total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(
        jnp.arange(jax.device_count(), dtype=jnp.float32))
    return {"total": total, "x64": np.asarray(jnp.zeros(()).dtype == jnp.float64),
            "seen": np.asarray(os.environ.get("LEAKED", "") == "yes")}


def leak():
    """Everything a program may change in its process, changed."""
    jax.config.update("jax_enable_x64", True)
    os.environ["LEAKED"] = "yes"
    os.chdir("/")
    return np.zeros(1)


def hashed():
    return np.asarray(hash("pmap-migrate") % 1000003)


def unseeded():
    import random
    return np.asarray([np.random.random(), random.random()])


def marker():
    return np.asarray(int(os.environ["RUN_MARKER"]))


def sleeps():
    import time
    time.sleep(600)
    return np.zeros(1)
'''


@pytest.fixture
def program(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    return tmp_path


def test_a_warm_run_is_what_a_fresh_run_gives(program, monkeypatch):
    warm = {n: run_entry(program, "prog:run", devices=n) for n in (8, 2, 8)}
    monkeypatch.setenv(warm_workers.FRESH_WORKERS, "1")
    fresh = run_entry(program, "prog:run", devices=8)
    for outcome in (*warm.values(), fresh):
        assert outcome.ok, outcome.error
    # The device count is the run's own, read from its XLA_FLAGS after the fork.
    assert warm[2].output["arrays"]["leaf1"].tolist() == [1.0, 1.0]
    assert warm[8].output["arrays"]["leaf1"].tolist() == [28.0] * 8
    assert warm[8].output["leaves"] == fresh.output["leaves"]
    # The HLO dump folder is the run's own too: the same collectives as a fresh run.
    assert warm[8].compiled.program_collectives() == fresh.compiled.program_collectives()
    assert sum(fresh.compiled.program_collectives().values()) >= 1


def test_what_a_run_changes_in_its_process_does_not_reach_the_next_one(program):
    assert run_entry(program, "prog:leak", devices=2).ok
    after = run_entry(program, "prog:run", devices=2)
    assert after.ok, after.error
    arrays = after.output["arrays"]
    assert not arrays["leaf2"] and not arrays["leaf0"]  # "seen" and "x64", sorted keys


def test_repeats_in_other_lanes_run_in_other_interpreters(program, monkeypatch):
    """The determinism guard's repeats (lanes) keep what fresh workers gave them: another
    interpreter, here seen as another string-hash seed."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    same = [run_entry(program, "prog:hashed", devices=1, lane=0) for _ in range(2)]
    other = run_entry(program, "prog:hashed", devices=1, lane=1)
    values = [int(o.output["arrays"]["leaf0"]) for o in (*same, other)]
    assert values[0] == values[1] != values[2]


def test_unseeded_random_numbers_differ_between_runs_as_in_fresh_workers(program):
    """numpy's and Python's global generators are seeded from the OS in a fresh interpreter:
    two runs of a program that draws unseeded numbers must still disagree (the guard's
    "nondeterministic"), not replay the warm worker's state."""
    first, second = (run_entry(program, "prog:unseeded", devices=1, lane=0) for _ in range(2))
    assert first.ok and second.ok, (first.error, second.error)
    a, b = first.output["arrays"]["leaf0"], second.output["arrays"]["leaf0"]
    assert a[0] != b[0] and a[1] != b[1]


def test_runs_differing_in_other_variables_share_warm_workers_and_idle_ones_are_few(
        program, monkeypatch):
    """A variable no interpreter reads at import (pytest sets PYTEST_CURRENT_TEST per test)
    reaches its run but starts no new warm worker; the idle ones stay within MAX_IDLE."""
    started = []
    real = warm_workers.WarmWorker.__init__

    def counting(self, *args, **kwargs):
        started.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(warm_workers.WarmWorker, "__init__", counting)
    for value in range(4):
        monkeypatch.setenv("RUN_MARKER", str(value))
        outcome = run_entry(program, "prog:marker", devices=1)
        assert outcome.ok, outcome.error
        assert int(outcome.output["arrays"]["leaf0"]) == value
    assert len(started) <= 1
    for lane in range(warm_workers.MAX_IDLE + 3):
        assert run_entry(program, "prog:marker", devices=1, lane=lane).ok
    assert warm_workers.POOL.idle_count() <= warm_workers.MAX_IDLE


def test_a_run_past_its_timeout_is_killed_and_the_warm_worker_serves_again(program):
    started = time.monotonic()
    slow = run_entry(program, "prog:sleeps", devices=1, timeout=5)
    assert not slow.ok and slow.error.startswith("timed out after 5 s")
    assert time.monotonic() - started < 60
    assert run_entry(program, "prog:run", devices=2).ok


def test_nothing_outlives_a_harness_killed_with_sigkill(program):
    harness = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            from pathlib import Path
            from equivalence.runner import run_entry
            run_entry(Path({str(program)!r}), "prog:sleeps", devices=1, timeout=600)
        """)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        deadline = time.monotonic() + 120
        while not (family := _descendants(harness.pid)) or len(family) < 2:
            assert time.monotonic() < deadline, "no warm worker and run started"
            time.sleep(0.2)
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(family):
            assert time.monotonic() < deadline, f"left behind: {_alive(family)}"
            time.sleep(0.2)
    finally:
        if harness.poll() is None:
            harness.kill()


def _descendants(pid: int) -> list[int]:
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(proc.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_output_arrays_match_between_fresh_and_warm_for_the_legacy_reference(program,
                                                                              monkeypatch):
    legacy = ROOT / ".venv-jax-legacy" / "bin" / "python"
    if not legacy.exists():
        pytest.skip("no legacy venv (python -m equivalence.legacy_env)")
    warm = run_entry(program, "prog:run", devices=4, python=str(legacy))
    monkeypatch.setenv(warm_workers.FRESH_WORKERS, "1")
    fresh = run_entry(program, "prog:run", devices=4, python=str(legacy))
    assert warm.ok and fresh.ok, (warm.error, fresh.error)
    assert warm.jax_version == fresh.jax_version == "0.4.38"
    np.testing.assert_array_equal(warm.output["arrays"]["leaf1"], fresh.output["arrays"]["leaf1"])
