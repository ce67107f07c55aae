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
        {"path": "changed.py", "changed": True, "encoding": "utf-8"},
        {"path": "unchanged.py", "changed": False, "encoding": "utf-8"},
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
                   lambda d: d.update(schema_version=2)):
        broken = copy.deepcopy(document)
        mutate(broken)
        assert list(check.iter_errors(broken)), "the schema let a broken document through"
