"""What a run prints and where: --severity, --quiet, --statistics, -o/--output, and the
progress bar on stderr whenever stderr is a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from migrator import cli
from migrator.cli import app

SIMPLE = b'''import functools
import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, None))
def step(x, w):
    return lax.psum(x * w, "i")
'''
REFUSED = b"import jax\n\nf = jax.pmap(lambda x: x, in_axes=-1)\n"  # PM201, a warning
runner = CliRunner()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_bytes(SIMPLE)
    (tmp_path / "b.py").write_bytes(SIMPLE)
    (tmp_path / "neg.py").write_bytes(REFUSED)
    return tmp_path


def run(*args: str):
    return runner.invoke(app, [*args, "--no-progress"])


def test_severity_hides_lower_findings_but_not_the_exit_code(tree):
    everything = run("scan", str(tree))
    assert [line.split()[1] for line in everything.stdout.splitlines()] == ["PM100", "PM100", "PM201"]
    warnings = run("scan", str(tree), "--severity", "warning")
    assert [line.split()[1] for line in warnings.stdout.splitlines()] == ["PM201"]
    errors = run("scan", str(tree), "--severity", "error")
    assert errors.stdout == ""
    assert everything.exit_code == warnings.exit_code == errors.exit_code == 1
    assert "3 pmap sites" not in errors.stderr and "2 pmap sites migrated, 1 need a human" in errors.stderr
    document = json.loads(run("scan", str(tree), "--format", "json", "--severity", "warning").stdout)
    assert [f["code"] for f in document["findings"]] == ["PM201"]
    applied = run("diff", str(tree), "--severity", "warning")
    assert "PM100" not in applied.stderr and "PM201" in applied.stderr
    assert "+++ b/" in applied.stdout, "the diff is whole"


def test_quiet_prints_the_findings_and_nothing_else(tree):
    loud = run("diff", str(tree))
    quiet = run("diff", str(tree), "--quiet")
    assert quiet.stdout == loud.stdout
    assert "pmap-migrate:" in loud.stderr and "pmap-migrate:" not in quiet.stderr
    assert [line for line in quiet.stderr.splitlines() if line] == [
        line for line in loud.stderr.splitlines() if not line.startswith("pmap-migrate:")]
    assert quiet.exit_code == loud.exit_code == 1
    scan = run("scan", str(tree), "-q")
    assert scan.stderr == "" and scan.stdout.count("PM100") == 2


def test_statistics_count_per_code_as_ruff_prints_them(tree):
    scan = run("scan", str(tree), "--statistics")
    assert scan.stdout == "2\tPM100\t[*] pmap-migrated\n1\tPM201\t[ ] negative-axis\n"
    assert scan.exit_code == 1
    diff = run("diff", str(tree), "--statistics")
    assert "+++ b/" in diff.stdout and "PM100 info" not in diff.stderr
    assert diff.stderr.startswith("2\tPM100\t[*] pmap-migrated\n1\tPM201\t")
    as_json = json.loads(run("scan", str(tree), "--statistics", "--format", "json").stdout)
    assert as_json[0] == {"code": "PM100", "name": "pmap-migrated", "count": 2, "fixable": True}
    filtered = run("scan", str(tree), "--statistics", "--severity", "warning")
    assert filtered.stdout.startswith("1\tPM201\t")
    refused = run("scan", str(tree), "--statistics", "--format", "sarif")
    assert refused.exit_code == 2 and "--statistics" in refused.stderr


def test_output_file_for_the_diff_and_for_scan_formats(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    diff = run("diff", str(tree), "-o", str(out / "change.patch"))
    assert diff.stdout == "" and diff.exit_code == 1
    patch = (out / "change.patch").read_text()
    assert patch == run("diff", str(tree)).stdout and "+++ b/" in patch
    assert "PM100" in diff.stderr, "findings stay on stderr"
    scan = run("scan", str(tree), "--format", "sarif", "--output", str(out / "scan.sarif"))
    assert scan.stdout == "" and scan.exit_code == 1
    assert len(json.loads((out / "scan.sarif").read_text())["runs"][0]["results"]) == 3
    unwritable = run("scan", str(tree), "-o", str(out / "no" / "such" / "dir.txt"))
    assert unwritable.exit_code == 2 and "--output" in unwritable.stderr


class _Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("stdout_tty", [True, False])
def test_progress_follows_stderr_alone(monkeypatch, stdout_tty):
    monkeypatch.setattr(sys, "stdout", _Stream(stdout_tty))
    monkeypatch.setattr(sys, "stderr", _Stream(True))
    assert cli._show_progress(True, quiet=False, files=2)  # `diff > x.patch` too
    assert not cli._show_progress(True, quiet=True, files=2)
    assert not cli._show_progress(False, quiet=False, files=2)
    assert not cli._show_progress(True, quiet=False, files=1)
    monkeypatch.setattr(sys, "stderr", _Stream(False))
    assert not cli._show_progress(True, quiet=False, files=2)


def test_progress_bar_is_drawn_on_stderr_while_stdout_is_a_file(tree, tmp_path_factory):
    """`diff > x.patch` on a terminal: the bar shows on stderr, the patch file is clean."""
    import pty

    leader, follower = pty.openpty()
    patch = tmp_path_factory.mktemp("out") / "x.patch"
    with patch.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "migrator.cli", "diff", str(tree)], cwd=ROOT, stdout=stdout,
            stderr=follower, env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80"),
        )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert done.returncode == 1
    assert b"pmap-migrate " in seen and "━━━".encode() in seen, "the bar was drawn on the terminal"
    text = patch.read_bytes()
    assert b"\x1b[" not in text and text.startswith(b"--- a/")
