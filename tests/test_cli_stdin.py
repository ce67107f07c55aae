"""`-` reads the source from standard input, for editors and pipes: `diff -` prints its diff,
`apply -` prints the migrated source (findings on stderr); `--stdin-filename` names it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from migrator.cli import app

SIMPLE = b'''import functools
import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, None))
def step(x, w):
    return lax.psum(x * w, "i")
'''
runner = CliRunner()


def test_apply_from_stdin_prints_what_apply_writes(tmp_path):
    on_disk = tmp_path / "a.py"
    on_disk.write_bytes(SIMPLE)
    assert runner.invoke(app, ["apply", str(on_disk), "--no-progress"]).exit_code == 0
    piped = runner.invoke(app, ["apply", "-"], input=SIMPLE)
    assert piped.exit_code == 0
    assert piped.stdout_bytes == on_disk.read_bytes() != SIMPLE
    assert "-:6:2: PM100 info" in piped.stderr


def test_diff_from_stdin(tmp_path):
    result = runner.invoke(app, ["diff", "-"], input=SIMPLE)
    assert result.exit_code == 1
    assert result.stdout.startswith("--- a/-\n+++ b/-\n")
    assert "+from jax.sharding import PartitionSpec as P\n" in result.stdout
    clean = runner.invoke(app, ["diff", "-"], input=b"x = 1\n")
    assert clean.exit_code == 0 and clean.stdout == ""


def test_stdin_filename_finds_the_configuration_and_names_the_findings(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pmap-migrate]\ntarget-jax = "0.4.38"\n'
        '[tool.pmap-migrate.per-path."legacy/**"]\nignore = ["PM100"]\n'
    )
    named = tmp_path / "pkg" / "m.py"  # need not exist
    result = runner.invoke(app, ["apply", "-", "--stdin-filename", str(named)], input=SIMPLE)
    assert b"check_rep=False" in result.stdout_bytes, "target-jax of the project found from the name"
    assert "pkg/m.py:6:2: PM100" in result.stderr
    assert not named.exists(), "the named file is never written"
    legacy = runner.invoke(app, ["apply", "-", "--stdin-filename", str(tmp_path / "legacy" / "old.py")],
                           input=SIMPLE)
    assert legacy.stdout_bytes == SIMPLE, "the per-path ignore applies at the name"
    scan = runner.invoke(app, ["scan", "-", "--stdin-filename", str(named), "--format", "json"],
                         input=SIMPLE)
    assert [f["code"] for f in json.loads(scan.stdout)["findings"]] == ["PM100"]


def test_a_file_that_does_not_parse_comes_back_unchanged_with_exit_2():
    broken = b"import jax\ndef f(:\n    jax.pmap(f)\n"
    result = runner.invoke(app, ["apply", "-"], input=broken)
    assert result.exit_code == 2
    assert result.stdout_bytes == broken and "PM001" in result.stderr


def test_a_notebook_named_on_stdin_is_migrated_as_a_notebook():
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": SIMPLE.decode().splitlines(keepends=True)}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    result = runner.invoke(app, ["apply", "-", "--stdin-filename", "nb.ipynb"],
                           input=json.dumps(notebook).encode())
    assert result.exit_code == 0, result.stderr
    migrated = json.loads(result.stdout)
    assert "shard_map" in "".join(migrated["cells"][0]["source"])
    assert "nb.ipynb:cell 1:6:2: PM100" in result.stderr


def test_stdin_is_refused_where_it_cannot_work(tmp_path):
    cases = [
        (["diff", "-", str(tmp_path)], "PATH"),
        (["apply", "-", "--out-dir", str(tmp_path)], "--out-dir"),
        (["diff", "-", "--helper-module", "pkg.helpers"], "--helper-module"),
        (["scan", str(tmp_path), "--stdin-filename", "x.py"], "--stdin-filename"),
    ]
    for args, blamed in cases:
        result = runner.invoke(app, args, input=SIMPLE)
        assert result.exit_code == 2, args
        assert blamed in result.stderr, (args, result.stderr)
