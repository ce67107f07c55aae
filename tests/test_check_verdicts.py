"""check's determinism guard, its attribution of a difference (the JAX upgrade or the
migration), and the values a difference shows in each report format.

The report tests build outcomes in memory (no JAX, fast); the guard and attribution tests run
real programs in subprocesses, the attribution ones with the original under the legacy jax
0.4.38 interpreter (slow-marked: `.ci/run` runs them with `-m slow`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import ROOT, legacy_python_or_skip
from rich.console import Console

from equivalence import reports
from equivalence.check import CheckOptions, check, compare_repeated
from equivalence.compare import compare_outputs
from equivalence.runner import RunOutcome
from transforms.pipeline import migrate_source


def outcome(jax_version="0.10.2", **leaves) -> RunOutcome:
    arrays = {name: np.asarray(value) for name, value in leaves.items()}
    described = [{"path": f"['{name}']", "key": name, "dtype": str(array.dtype),
                  "shape": list(array.shape)} for name, array in arrays.items()]
    output = {"treedef": "PyTreeDef({" + ", ".join(f"'{n}': *" for n in arrays) + "})",
              "leaves": described, "arrays": arrays}
    return RunOutcome(True, 1.0, output=output, jax_version=jax_version)


# ----------------------------------------------------------------------------- the values

def test_a_scalar_difference_shows_expected_and_got():
    [difference] = compare_outputs(outcome(correct=np.int32(21)).output,
                                   outcome(correct=np.int32(35)).output)
    assert str(difference) == ("['correct']: 1 of 1 values differ (int32, exact): expected 21, "
                               "got 35; max abs difference 14, max rel difference 0.667")
    assert difference.values["first"] == [{"index": [], "expected": 21, "got": 35}]


def test_an_array_difference_shows_the_first_positions_sizes_and_tolerance():
    expected = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = expected.copy()
    got[1, 2] += 0.5
    got[3, 5] = -1.0
    [difference] = compare_outputs(outcome(w=expected).output, outcome(w=got).output)
    text = str(difference)
    assert "2 of 24 values differ (float32, rtol 1e-06, atol 1e-06)" in text
    assert "[1, 2] expected 8, got 8.5; [3, 5] expected 23, got -1" in text
    assert "max abs difference 24, max rel difference 1.04" in text
    values = difference.values
    assert values["tolerance"] == {"rtol": 1e-06, "atol": 1e-06}
    assert values["max_abs"] == 24.0 and values["differing"] == 2
    # Within tolerance is no difference; NaN equals NaN.
    assert compare_outputs(outcome(w=np.float32([1.0, np.nan])).output,
                           outcome(w=np.float32([1.0 + 1e-7, np.nan])).output) == []


def test_only_the_first_positions_are_listed():
    [difference] = compare_outputs(outcome(x=np.zeros(100, np.int32)).output,
                                   outcome(x=np.ones(100, np.int32)).output)
    assert str(difference).count("expected 0, got 1") == 5
    assert "... 95 more" in str(difference)


def scalar_report():
    return compare_repeated("prog:run", 8, [outcome("0.4.38", correct=np.int32(21))],
                            [outcome(correct=np.int32(35))], same_jax=False)


def test_the_terminal_report_shows_the_values(tmp_path):
    console = Console(record=True, width=200)
    reports.print_terminal([scalar_report()], console)
    text = console.export_text()
    assert "difference outputs: ['correct']: 1 of 1 values differ (int32, exact): " \
           "expected 21, got 35" in text


def test_the_json_report_holds_the_values(tmp_path):
    reports.write_json([scalar_report()], tmp_path / "r.json")
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["schema_version"] == 3
    outputs = document["results"][0]["outputs"]
    assert "expected 21, got 35" in outputs["differences"][0]
    [leaf] = outputs["details"]["values"]
    assert leaf["path"] == "['correct']"
    assert leaf["values"]["first"] == [{"index": [], "expected": 21, "got": 35}]
    assert leaf["values"]["tolerance"] == "exact" and leaf["values"]["max_abs"] == 14.0


def test_the_junit_report_holds_the_values(tmp_path):
    reports.write_junit([scalar_report()], tmp_path / "r.xml")
    failure = ET.parse(tmp_path / "r.xml").getroot().find("testcase/failure")
    assert "expected 21, got 35" in failure.get("message")
    assert "expected 21, got 35" in failure.text


# ------------------------------------------------------------------ the guard, in memory

def test_a_side_that_disagrees_with_itself_is_nondeterministic_not_different():
    report = compare_repeated(
        "prog:run", 8,
        [outcome(correct=np.int32(21)), outcome(correct=np.int32(35))],
        [outcome(correct=np.int32(21)), outcome(correct=np.int32(21))], same_jax=True)
    assert report.verdict == "nondeterministic"
    assert report.nondeterminism["original"] == [
        {"path": "['correct']", "values_seen": ["21", "35"]}]
    assert report.nondeterminism["migrated"] == []
    assert report.nondeterministic == [
        "the original disagreed with itself over 2 runs: ['correct'] was 21, 35"]
    from equivalence.check import exit_code, summary

    assert exit_code([report]) == 1 and summary([report])["nondeterministic"] == 1
    # With one run per side (--repeat 1) the same first runs are just equivalent.
    alone = compare_repeated("prog:run", 8, [outcome(correct=np.int32(21))],
                             [outcome(correct=np.int32(21))], same_jax=True)
    assert alone.verdict == "equivalent" and alone.original["runs"] == 1


def test_a_nondeterministic_report_in_each_format(tmp_path):
    report = compare_repeated(
        "prog:run", 8, [outcome(x=np.float32([1, 2, 3, 4, 5]))] * 2,
        [outcome(x=np.float32([1, 2, 3, 4, 5])), outcome(x=np.float32([1, 2, 9, 4, 5]))],
        same_jax=True)
    line = ("the migrated program disagreed with itself over 2 runs: "
            "['x'] was 3.0 at [2], 9.0 at [2]")
    assert report.nondeterministic == [line]
    console = Console(record=True, width=200)
    reports.print_terminal([report], console)
    assert f"nondeterministic {line}" in console.export_text()
    reports.write_json([report], tmp_path / "r.json")
    result = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert result["verdict"] == "nondeterministic"
    assert result["migrated"]["runs"] == 2
    reports.write_junit([report], tmp_path / "r.xml")
    failure = ET.parse(tmp_path / "r.xml").getroot().find("testcase/failure")
    assert failure.get("type") == "nondeterministic" and failure.get("message") == line


# ------------------------------------------------------------ the guard, real programs

PSUM = '''import time

import jax
import numpy as np

step = jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")


def run():
    n = jax.local_device_count()
    out = {"total": np.asarray(step(np.ones(n, np.float32)))}
'''
CLOCK = PSUM + '''    out["stamp"] = np.asarray(time.perf_counter_ns() % 1000003, np.int64)
    return out
'''
UNSEEDED = PSUM + '''    out["noise"] = np.random.default_rng().normal(size=3).astype(np.float32)
    return out
'''
STEADY = PSUM + "    return out\n"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "migrator.cli", "check", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.slow
def test_an_original_that_reads_the_clock_is_nondeterministic(tmp_path):
    (tmp_path / "clock.py").write_text(CLOCK)
    done = cli(tmp_path, "--entry", "clock:run", "--devices", "2",
               "--report-json", tmp_path / "r.json")
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert result["verdict"] == "nondeterministic"
    assert [leaf["path"] for leaf in result["nondeterminism"]["original"]] == ["['stamp']"]
    assert "the original disagreed with itself over 2 runs: ['stamp'] was" in done.stdout
    assert "determinism guard: each side ran 2 times" in done.stdout
    # --repeat 1 turns the guard off: the same program is then merely different.
    off = cli(tmp_path, "--entry", "clock:run", "--devices", "2", "--repeat", "1",
              "--report-json", tmp_path / "off.json")
    assert off.returncode == 1
    off_result = json.loads((tmp_path / "off.json").read_text())["results"][0]
    assert off_result["verdict"] == "different"
    assert "determinism guard off" in off.stdout


@pytest.mark.slow
def test_a_migrated_side_drawing_unseeded_numbers_is_nondeterministic(tmp_path):
    steady = STEADY.replace("    return out\n",
                            '    out["noise"] = np.zeros(3, np.float32)\n    return out\n')
    for side, text in (("original", steady),
                       ("migrated", migrate_source(UNSEEDED.encode()).source.decode())):
        (tmp_path / side).mkdir()
        (tmp_path / side / "prog.py").write_text(text)
    [report] = check(tmp_path / "original", tmp_path / "migrated", ["prog:run"],
                     CheckOptions(devices=(2,), repeat=3, timeout=120))
    assert report.verdict == "nondeterministic", report.differences
    assert report.nondeterminism["original"] == []
    [leaf] = report.nondeterminism["migrated"]
    assert leaf["path"] == "['noise']" and len(leaf["values_seen"]) == 3


# ---------------------------------------------------------------------- who changed it

# The pmap part is the same on both JAX versions; `minor` is JAX's minor version, which is
# what the upgrade changes, pmap or not. (Numerics are no stable witness: a float16 cumsum
# used here before rounds the same way on both versions on some CPUs, and the harness aligns
# the random streams.)
ATTRIBUTED = '''import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def step(x):
    return jax.lax.pmean(x, "i") * 2.0


def run():
    n = jax.local_device_count()
    out = {"mean": np.asarray(step(np.arange(n, dtype=np.float32)))}
'''
UPGRADE_ONLY = ATTRIBUTED + '''    out["minor"] = np.asarray(int(jax.__version__.split(".")[1]))
    return out
'''
MIGRATION_ONLY = ATTRIBUTED + "    return out\n"
BOTH = UPGRADE_ONLY
# Planted into the migration: pmean becomes psum.
FAULT = ("jax.lax.pmean(x", "jax.lax.psum(x")
# An original that current JAX cannot run (device_put_replicated is gone).
LEGACY_ONLY = ATTRIBUTED.replace(
    '    out = {"mean": np.asarray(step(np.arange(n, dtype=np.float32)))}\n',
    '    x = jax.device_put_replicated(np.float32(1.0), jax.local_devices())\n'
    '    out = {"mean": np.asarray(step(x + np.arange(n, dtype=np.float32)))}\n') \
    + "    return out\n"


@pytest.mark.slow
def test_who_changed_it(tmp_path):
    """Original under jax 0.4.38, migrated under 0.10.2: an upgrade-only difference, a
    migration-only one, both, and an original that cannot run on 0.10.2."""
    cases = {
        "upgrade_only": (UPGRADE_ONLY, False),
        "migration_only": (MIGRATION_ONLY, True),
        "both": (BOTH, True),
        "legacy_only": (LEGACY_ONLY, True),
    }
    for side in ("original", "migrated"):
        (tmp_path / side).mkdir()
    for name, (source, fault) in cases.items():
        migrated = migrate_source(source.encode()).source.decode()
        if fault:
            assert FAULT[0] in migrated
            migrated = migrated.replace(*FAULT)
        (tmp_path / "original" / f"{name}.py").write_text(source)
        (tmp_path / "migrated" / f"{name}.py").write_text(migrated)
    options = CheckOptions(devices=(4,), reference_python=legacy_python_or_skip(), repeat=1,
                           timeout=180)
    found = {r.entry.split(":")[0]: r for r in check(
        tmp_path / "original", tmp_path / "migrated", [f"{n}:run" for n in cases], options)}
    for report in found.values():
        assert report.verdict == "different", (report.entry, report.differences)

    upgrade = found["upgrade_only"].attribution
    assert upgrade["message"] == "the JAX upgrade changed it", upgrade
    assert [leaf["path"] for leaf in upgrade["leaves"]] == ["['minor']"]
    assert "expected 4, got 10" in upgrade["leaves"][0]["upgrade"]

    migration = found["migration_only"].attribution
    assert migration["message"] == "the migration changed it", migration
    assert "matches the original on jax 0.4.38" in migration["why"]

    both = found["both"].attribution
    assert both["verdict"] == "both", both
    assert {leaf["path"]: leaf["verdict"] for leaf in both["leaves"]} == {
        "['mean']": "migration", "['minor']": "upgrade"}

    legacy_only = found["legacy_only"].attribution
    assert legacy_only["verdict"] == "unknown", legacy_only
    assert "the original does not run on jax 0.10.2" in legacy_only["why"]

    console = Console(record=True, width=240)
    reports.print_terminal(list(found.values()), console)
    text = console.export_text()
    assert "who the JAX upgrade changed it (the original on jax 0.10.2 already differs" in text
    assert "who the migration changed it (the original on jax 0.10.2 matches" in text
