"""Harness stalls: XLA:CPU's collective rendezvous on fake devices can starve, and `check` must
neither let that happen to an ordinary training loop nor ever report it as a difference in the
program. Stalls are planted two ways: entries that print the runtime's own messages (the abort
of jax >= 0.5, the endless warnings of jax 0.4.38), and a real loop run with XLA's default
thread pool, which the legacy runtime deadlocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, legacy_python_or_skip
from equivalence.check import CheckOptions, check, exit_code

# The runtime's words, as jax 0.10.2 and jax 0.4.38 print them on this machine.
MODERN_ABORT = (
    "F1201 19:58:04.614968    7284 rendezvous.cc:161] [id=0] Termination timeout for `all reduce "
    "RendezvousKey{run_id=RunId: 982749638, global_devices=[0, 1, 2, 3, 4, 5, 6, 7], "
    "num_local_participants=8, collective_op_kind=cross_module, op_id=1}` of 40 seconds exceeded. "
    "Exiting to ensure a consistent program state. Expected 8 threads to join the rendezvous, but "
    "only 7 of them arrived on time."
)
LEGACY_WARNING = (
    "E1201 19:38:12.799884   12396 collective_ops_utils.h:346] This thread has been waiting for "
    "5000ms for and may be stuck: participant AllReduceParticipantData{rank=2, element_count=16, "
    "type=F32, rendezvous_key=RendezvousKey{run_id=RunId: 270, global_devices=[0,1,2,3,4,5,6,7], "
    "num_local_participants=8, collective_op_kind=cross_replica, op_id=1}} waiting for all "
    "participants to arrive at rendezvous RendezvousKey{run_id=RunId: 270}"
)

FINE = '''import numpy as np


def aborts():
    return {"a": np.arange(4.0)}


hangs = fine = aborts
'''
STALLING = f'''import os
import sys
import time

import numpy as np


def aborts():  # jax >= 0.5: warn, then abort the process after 40 s
    sys.stderr.write({MODERN_ABORT!r} + "\\n")
    sys.stderr.flush()
    os.abort()


def hangs():  # jax 0.4.38: warn every 5 s and wait forever
    while True:
        sys.stderr.write({LEGACY_WARNING!r} + "\\n")
        sys.stderr.flush()
        time.sleep(1)


def fine():
    return {{"a": np.arange(4.0)}}
'''

# A five-line training loop: one pmapped step with a pmean, fed a numpy batch 1000 times.
LOOP = '''import os

import jax
import numpy as np

if os.environ.get("UNDO_POOL_SIZE"):
    os.environ["PJRT_NPROC"] = "0"  # read when the backend starts: XLA's default, max(cores, devices)

step = jax.pmap(lambda w, x: w - 0.1 * jax.lax.pmean(x * w, "i"), axis_name="i")


def run():
    n = jax.local_device_count()
    w, x = np.ones((n, 16), np.float32), np.ones((n, 16), np.float32)
    for _ in range(STEPS):
        w = step(w, x)
    return {"w": np.asarray(w)}
'''


def roots(tmp_path, original, migrated):
    for name, text in (("original", original), ("migrated", migrated)):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "prog.py").write_text(text)
    return tmp_path / "original", tmp_path / "migrated"


@pytest.mark.slow  # a minute each: waits out stalls; .ci/run runs it
def test_a_stalled_side_is_a_harness_stall_never_a_difference(tmp_path):
    original, migrated = roots(tmp_path, FINE, STALLING)
    entries = ["prog:aborts", "prog:hangs", "prog:fine"]
    reports = list(check(original, migrated, entries, CheckOptions(devices=(2,), timeout=15)))
    aborted, hung, fine = reports
    assert [r.verdict for r in reports] == ["stalled", "stalled", "equivalent"]
    assert aborted.differences == [] and hung.differences == []
    assert "Expected 8 threads to join the rendezvous" in aborted.migrated["stall"]
    assert "worker aborted" in aborted.migrated["error"]
    assert "waiting for all participants to arrive at rendezvous" in hung.migrated["stall"]
    assert "timed out after 15 s in a collective rendezvous" in hung.migrated["error"]
    assert hung.stalls == [f"migrated stalled in XLA:CPU's collective rendezvous: {hung.migrated['stall']}"]
    assert exit_code(reports) == 2, "a stall means the check could not be made"

    # The same stalls on the original side: still stalls, not a broken original.
    original, migrated = roots(tmp_path / "swapped", STALLING, FINE)
    swapped = list(check(original, migrated, entries[:2], CheckOptions(devices=(2,), timeout=15)))
    assert [r.verdict for r in swapped] == ["stalled", "stalled"]
    assert all(r.stalls[0].startswith("original stalled") for r in swapped)


def test_stalls_in_text_json_and_junit_reports(tmp_path):
    original, migrated = roots(tmp_path, FINE, STALLING)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    completed = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", str(original), str(migrated),
         "--entry", "prog:aborts", "--entry", "prog:fine", "--devices", "2",
         "--report-json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml")],
        capture_output=True, text=True, env=env,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    text = " ".join(completed.stdout.split())  # rich wraps long lines
    assert "prog:aborts [2 devices]: stalled" in text
    assert "a harness stall, not a difference in the program" in text
    assert ("1 equivalent, 0 different, 0 nondeterministic, 1 stalled in the harness, "
            "0 could not be checked") in text
    assert " difference " not in text.replace("not a difference in", "")

    document = json.loads((tmp_path / "r.json").read_text())
    assert document["schema_version"] == 3
    assert document["summary"] == {"checks": 2, "equivalent": 1, "different": 0,
                                   "nondeterministic": 0, "stalled": 1, "error": 0}
    stalled = document["results"][0]
    assert stalled["verdict"] == "stalled" and stalled["original"]["stall"] == ""
    assert "only 7 of them arrived" in stalled["migrated"]["stall"]

    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    [error] = suite.iter("error")
    assert error.get("type") == "harness-stall"
    assert error.get("message").startswith("a harness stall, not a difference in the program")
    assert not list(suite.iter("failure"))


@pytest.mark.slow  # a minute each: waits out stalls; .ci/run runs it
def test_legacy_runtime_stall_is_recognised_and_the_pool_size_cures_it(tmp_path):
    """The real thing under jax 0.4.38 at 8 devices: with XLA's default pool the loop deadlocks
    (the runtime warns every 5 s and never returns); with the harness's pool it completes."""
    legacy = legacy_python_or_skip()
    loop = LOOP.replace("STEPS", "3000")
    original, migrated = roots(tmp_path, loop, loop)
    options = CheckOptions(devices=(8,), reference_python=legacy, python=legacy, timeout=60)
    [cured] = check(original, migrated, ["prog:run"], options)
    assert cured.verdict == "equivalent", cured.differences + cured.stalls

    os.environ["UNDO_POOL_SIZE"] = "1"
    try:
        options.timeout = 30
        [report] = check(original, migrated, ["prog:run"], options)
    finally:
        del os.environ["UNDO_POOL_SIZE"]
    assert report.verdict == "stalled", report.differences
    assert "waiting for all participants to arrive at rendezvous" in report.original["stall"]
    assert report.differences == []
