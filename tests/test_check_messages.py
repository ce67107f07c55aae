"""What `check` says when an entry fails: one line when both sides fail the same way, a cause
for a worker that ends in silence (os._exit), the per-entry --timeout, and the migration's
findings only for the entries' own modules.

The in-memory tests build outcomes (no JAX); one CLI run and one hanging entry cover the
rest with real subprocesses on 2 fake devices (about 15 s together).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from rich.console import Console

from equivalence import reports
from equivalence.check import CheckOptions, check, compare_repeated, guard_cost
from equivalence.runner import RunOutcome, died_without_result


def failed(error: str) -> RunOutcome:
    return RunOutcome(False, 1.0, error=error, jax_version="0.10.2")


def test_both_sides_failing_the_same_way_is_said_once():
    report = compare_repeated("prog:run", 2, [failed("ValueError: no data")],
                              [failed("ValueError: no data")], same_jax=True)
    assert report.verdict == "error"
    assert report.differences == ["both sides failed the same way: ValueError: no data"]
    console = Console(record=True, width=200)
    reports.print_terminal([report], console)
    text = console.export_text()
    assert text.count("no data") == 1
    assert "error both sides failed the same way: ValueError: no data" in text


def test_sides_failing_differently_are_each_named_original_first():
    report = compare_repeated("prog:run", 2, [failed("ValueError: no data")],
                              [failed("KeyError: 'x'")], same_jax=True)
    assert report.differences == ["original failed: ValueError: no data",
                                  "migrated failed: KeyError: 'x'"]
    only_migrated = compare_repeated(
        "prog:run", 2, [RunOutcome(True, 1.0, output={"treedef": "*", "leaves": [],
                                                      "arrays": {}})],
        [failed("KeyError: 'x'")], same_jax=True)
    assert only_migrated.differences == ["migrated failed: KeyError: 'x'"]


def test_a_silent_death_says_how_it_ended():
    assert died_without_result("worker", 3, "") == (
        "worker died (exit 3) without a result (os._exit or a crash)")
    assert died_without_result("process 1 of 2", -11, "") == (
        "process 1 of 2 died (signal SIGSEGV) without a result (a crash, or killed)")
    assert died_without_result("worker", 1, "Fatal Python error") == (
        "worker died (exit 1) without a result (os._exit or a crash): Fatal Python error")


PROGRAM = '''import os
import time

import jax
import jax.numpy as jnp

g = jax.pmap(lambda x: x, in_axes=-1)  # PM201 in an entry's module: reported


def raises():
    raise ValueError("no data")


def exits():
    os._exit(3)


def hangs():
    time.sleep(120)
'''
# Not an entry: its findings are not check's to print.
NEIGHBOUR = "import jax\n\nh = jax.pmap(lambda x: x, in_axes=-1)\n"


def write_tree(root):
    root.mkdir()
    (root / "prog.py").write_text(PROGRAM)
    (root / "neighbour.py").write_text(NEIGHBOUR)
    return root


def test_check_cli_failures_and_findings(tmp_path):
    tree = write_tree(tmp_path / "tree")
    done = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", str(tree), "--entry", "prog:raises",
         "--entry", "prog:exits", "--devices", "2", "--repeat", "2", "--timeout", "120"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout
    # One line per entry where both sides failed alike, none per side.
    assert out.count("both sides failed the same way: ValueError: no data") == 1
    assert "original failed" not in out and "migrated failed" not in out
    # os._exit(3): the cause after the colon, not an empty tail.
    assert ("both sides failed the same way: worker died (exit 3) without a result "
            "(os._exit or a crash)") in out
    assert not [line for line in out.splitlines() if line.rstrip().endswith(":")
                and "failed" in line]
    # The guard still says what was asked for, though no side ran twice.
    assert "determinism guard: each side ran 2 times" in out
    # The migration's findings: the entry module's, not its neighbour's.
    assert "prog.py:7:5: PM201" in done.stderr, done.stderr
    assert "neighbour.py" not in done.stderr


def test_the_timeout_is_per_entry_and_a_hung_side_is_not_run_again(tmp_path):
    """Each run gets the whole --timeout; a side whose first run timed out is not repeated,
    so with --repeat 2 a hanging entry costs one timeout, not two."""
    tree = write_tree(tmp_path / "tree")
    timeout = 4
    [report] = check(tree, tree, ["prog:hangs"],
                     CheckOptions(devices=(2,), repeat=2, timeout=timeout))
    assert report.differences == [f"both sides failed the same way: timed out after {timeout} s"]
    for side in ("original", "migrated"):
        outcome = getattr(report, side)
        assert outcome["runs"] == 1 and outcome["seconds"] >= timeout
    assert timeout <= report.seconds < 1.75 * timeout, report.seconds
    assert guard_cost([report])["runs_per_side"] == 2  # asked for, reported as such


@pytest.mark.parametrize("name,module", [("pkg/__init__.py", "pkg"),
                                         ("pkg/mod.py", "pkg.mod"), ("top.py", "top")])
def test_a_files_module_is_its_import_name(tmp_path, name, module):
    from migrator.check_command import _module_of
    from migrator.files import SourceFile

    path = tmp_path / name
    result = type("Result", (), {"file": SourceFile(path, tmp_path, name)})()
    assert _module_of(result, tmp_path) == module
