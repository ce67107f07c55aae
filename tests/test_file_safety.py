"""Never lose a file: atomic writes under kill signals, files changing under the tool,
special files (read-only files, owners and hard links: test_file_safety_writes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from migrator.files import SourceFile
from migrator.options import MigrationOptions
from migrator.runner import process, write_result
from transforms.pipeline import migrate_source

SITE = b"import jax\n\n\n@jax.pmap\ndef f(x):\n    return x * %d\n"


def many_files(tree, count):
    tree.mkdir()
    originals = {}
    for i in range(count):
        path = tree / f"m{i:04d}.py"
        # Big files make each write slow enough to be interrupted in the middle of a run.
        data = (SITE % i) + b"".join(b"x%d = %d  # padding\n" % (j, j) for j in range(200))
        path.write_bytes(data)
        originals[path] = data
    return originals


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killed_apply_leaves_every_file_old_or_new(signum, tmp_path):
    originals = many_files(tmp_path / "tree", 40)
    expected = {p: migrate_source(d).source for p, d in originals.items()}
    process_ = subprocess.Popen(
        [sys.executable, "-m", "migrator.cli", "apply", str(tmp_path / "tree"), "-j", "1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    # Kill once some files are rewritten but not all.
    deadline = time.time() + 120
    while time.time() < deadline:
        done = sum(p.read_bytes() == expected[p] for p in list(originals)[:40])
        if done >= 5:
            break
        time.sleep(0.05)
    process_.send_signal(signum)
    process_.wait(timeout=60)
    states = [
        "new" if p.read_bytes() == expected[p] else "old" if p.read_bytes() == d else "broken"
        for p, d in originals.items()
    ]
    assert "broken" not in states
    assert "new" in states and "old" in states, "the kill must land in the middle of the run"
    leftovers = [p.name for p in (tmp_path / "tree").iterdir() if p.name.endswith(".pmap-migrate.tmp")]
    if signum == signal.SIGTERM:
        assert leftovers == []
    # A new run finishes the job and removes what a SIGKILL may have left.
    rerun = subprocess.run([sys.executable, "-m", "migrator.cli", "apply", str(tmp_path / "tree")],
                           cwd=ROOT, capture_output=True)
    assert rerun.returncode == 0, rerun.stderr
    assert all(p.read_bytes() == expected[p] for p in originals)
    assert not [p for p in (tmp_path / "tree").iterdir() if p.name.endswith(".pmap-migrate.tmp")]


def test_file_changed_while_running_is_not_overwritten(tmp_path):
    path = tmp_path / "a.py"
    path.write_bytes(SITE % 1)
    result = process(SourceFile(path, tmp_path, "a.py"), MigrationOptions())
    assert result.changed
    path.write_bytes(b"# edited by the user meanwhile\n")
    write_result(result, None)
    assert path.read_bytes() == b"# edited by the user meanwhile\n"
    assert [f.code for f in result.findings][-1] == "PM006"


def test_fifo_named_py_is_reported_not_read(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "ok.py").write_bytes(SITE % 2)
    result = subprocess.run([sys.executable, "-m", "migrator.cli", "scan", str(tmp_path)],
                            cwd=ROOT, capture_output=True, timeout=60)
    assert b"pipe.py:1:1: PM003" in result.stdout + result.stderr
    assert b"ok.py:4:1: PM100" in result.stdout


@pytest.mark.parametrize("content", [b"", b"\t\n", b"import jax\r\nf = jax.pmap(g)\nh = 1\r\n",
                                     b"import jax\nif True:\n\tf = jax.pmap(g)\n"])
def test_odd_but_valid_files_round_trip(content, tmp_path):
    """Empty files, tabs and mixed line endings: the output parses and untouched lines keep
    their bytes."""
    result = migrate_source(content)
    again = migrate_source(result.source)
    assert again.source == result.source
    if b"\r\n" in content:
        assert b"f = _pmap_style_shard_map(g)\n" in result.source  # its own ending kept
        assert b"h = 1\r\n" in result.source


def test_very_large_file_is_migrated_whole(tmp_path):
    """A 20,000-line module with sites at its start and end: both are migrated, every other
    line is kept byte for byte, and nothing in the path is quadratic (it finishes in CI)."""
    filler = "".join(f"def f_{i}(x):\n    return x * {i} + 1\n\n\n" for i in range(5_000))
    source = (
        "import jax\n\n\nfirst = jax.pmap(lambda x: x, axis_name='i')\n\n\n"
        + filler
        + "last = jax.pmap(lambda x: x + 1, axis_name='i')\n"
    ).encode()
    path = tmp_path / "big.py"
    path.write_bytes(source)
    result = subprocess.run([sys.executable, "-m", "migrator.cli", "apply", str(tmp_path),
                             "--no-progress"], cwd=ROOT, capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr
    migrated = path.read_bytes()
    assert b"jax.pmap(" not in migrated
    assert migrated.count(b"= _pmap_style_shard_map(lambda") == 2
    assert filler.encode() in migrated


def test_rewritten_code_is_checked_by_python_then_libcst():
    """A rewrite that does not parse is refused (PM004) with Python's message; code in a
    grammar newer than this interpreter (PEP 695 here) is judged by libcst instead."""
    from migrator.runner import _does_not_parse

    assert _does_not_parse(b"x = 1\n", b"x = 1\n") is None
    assert "line 1" in _does_not_parse(b"x = 1\n", b"x = (\n")
    newer = b"type Vector = list[float]\n"
    assert _does_not_parse(newer, newer + b"y = 2\n") is None
    assert _does_not_parse(newer, newer + b"y = (\n")
