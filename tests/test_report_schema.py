"""`scan` / `diff` --format json against its schema (docs/report.schema.json), on a real run
over a small tree with a changed and an unchanged file: every field validated, and the
values asserted (which file changed, the counts, the finding)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, require

jsonschema = require("jsonschema", "jsonschema validates the JSON report")

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
CHANGED = b"import jax\n\nf = jax.pmap(lambda x: x * 2)\n"
UNCHANGED = b"import jax\n\ng = jax.jit(lambda x: x * 2)\n"


def validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


def run_json(command: str, tree) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "migrator.cli", command, ".", "--format", "json", "--no-progress"],
        cwd=tree, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 1, done.stderr  # a change is pending
    if command == "scan":
        return json.loads(done.stdout)
    # diff: the patches on stdout; the document on stderr, before the summary line.
    assert done.stdout.startswith("--- a/changed.py\n")
    document, end = json.JSONDecoder().raw_decode(done.stderr)
    assert done.stderr[end:].strip().startswith("pmap-migrate: 2 files, 1 would change")
    return document


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    (root / "changed.py").write_bytes(CHANGED)
    (root / "unchanged.py").write_bytes(UNCHANGED)
    return root


@pytest.mark.parametrize("command", ["scan", "diff"])
def test_the_json_report_follows_its_schema_and_says_what_changed(tree, command):
    document = run_json(command, tree)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(document)]
    assert errors == []
    assert document["files"] == [
        {"path": "changed.py", "changed": True, "encoding": "utf-8", "fully_global": False},
        {"path": "unchanged.py", "changed": False, "encoding": "utf-8", "fully_global": None},
    ]
    assert document["summary"] == {"files": 2, "changed": 1, "migrated_sites": 1,
                                   "needs_human": 0, "errors": 0, "by_code": {"PM100": 1}}
    [finding] = document["findings"]
    assert {k: finding[k] for k in ("path", "cell", "line", "col", "code", "name", "severity",
                                    "fix")} == {
        "path": "changed.py", "cell": None, "line": 3, "col": 5, "code": "PM100",
        "name": "pmap-migrated", "severity": "info", "fix": "safe"}
    assert finding["message"] == "jax.pmap(lambda x: x * 2) -> jax.jit + jax.shard_map"
    assert finding["check"].startswith("The call keeps pmap's contract")


def test_the_schema_describes_every_field_and_admits_no_other(tree):
    """Every object in the schema closes its fields and describes each; a field the writer
    adds, drops or mistypes is caught."""
    def objects(node, where="$"):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                yield where, node
            for key, value in node.items():
                yield from objects(value, f"{where}.{key}")

    for where, node in objects(SCHEMA):
        assert node["additionalProperties"] is False, where
        assert set(node["required"]) == set(node["properties"]), where
        for name, field in node["properties"].items():
            assert field.get("description"), f"{where}.{name}"
    document = run_json("scan", tree)
    check = validator()
    for mutate in (lambda d: d["files"][0].update(extra=1),
                   lambda d: d["files"][0].update(changed="yes"),
                   lambda d: d["summary"].pop("changed"),
                   lambda d: d["findings"][0].update(severity="note"),
                   lambda d: d["files"][0].update(fully_global="no"),
                   lambda d: d["files"][0].pop("fully_global"),
                   lambda d: d.update(schema_version=1)):
        broken = copy.deepcopy(document)
        mutate(broken)
        assert list(check.iter_errors(broken)), "the schema let a broken document through"


GLOBAL = b'''import jax
import jax.numpy as jnp


@jax.pmap
def f(x):
    return jnp.sin(x)


def run():
    return f(jnp.ones((jax.local_device_count(), 3)))
'''
CONTRACT = b"import jax\nfrom data import load\n\nstep = jax.pmap(lambda x: x * 2)\nout = step(load())\n"


def test_global_style_reports_which_migrated_files_are_fully_global(tmp_path):
    """A file that goes global is fully global; one whose site keeps pmap's calling contract
    (`_per_device_shard_map`) is not; an unchanged one, or one changed only for another API
    (jax.tree_map), is not a migrated file (null). The text summary of the global style counts
    them; the faithful style's does not."""
    (tmp_path / "contract.py").write_bytes(CONTRACT)
    (tmp_path / "renamed.py").write_bytes(b"import jax\n\ny = jax.tree_map(abs, [1])\n")
    (tmp_path / "global_step.py").write_bytes(GLOBAL)
    (tmp_path / "unchanged.py").write_bytes(UNCHANGED)

    def scan(*flags):
        return subprocess.run(
            [sys.executable, "-m", "migrator.cli", "scan", ".", "--no-progress", *flags],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))

    done = scan("--format", "json", "--style", "global")
    document = json.loads(done.stdout)
    assert list(validator().iter_errors(document)) == []
    assert {f["path"]: f["fully_global"] for f in document["files"]} == {
        "contract.py": False, "global_step.py": True, "renamed.py": None, "unchanged.py": None}
    assert done.stderr.strip().endswith(", 1 of 2 migrated files fully global"), done.stderr
    assert "fully global" not in scan("--style", "faithful").stderr
