"""Fixture pairs: before.py -> after.py with expected findings, for every form and argument.

Each case is checked three ways: the rewrite is exactly the reviewed after.py, the findings
are exactly findings.txt, and a second run changes nothing (idempotency). The after.py files
import the helpers from `_pmap_helpers` (as `--helper-module` writes them), whose text is the
one snapshot tests/fixtures/_pmap_helpers.py. Runnable cases are also executed on 8 fake
devices, original and migrated (the module's own migration, helpers included), and must give
the same outputs: those runs start two JAX processes each, so they are marked `equivalence`
(`pytest -m equivalence`; .ci/run runs them).
"""

from __future__ import annotations

import shutil

import pytest

from conftest import fixture_cases, is_runnable, original_python
from equivalence.compare import compare_outputs
from equivalence.runner import run_entry
from regen_fixtures import (
    HELPER_SNAPSHOT, SHORT_HELPER_SNAPSHOT, findings_text, helper_module_text, migrate_fixture,
    short_helper_text,
)
from transforms.pipeline import migrate_source

CASES = fixture_cases()


def test_the_helper_snapshots_are_what_the_tool_writes():
    assert HELPER_SNAPSHOT.read_bytes() == helper_module_text()
    assert SHORT_HELPER_SNAPSHOT.read_text(encoding="utf-8") == short_helper_text()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_matches_reviewed_fixture(case):
    result = migrate_fixture((case / "before.py").read_bytes())
    assert result.source == (case / "after.py").read_bytes()
    assert findings_text(result.findings) == (case / "findings.txt").read_text(encoding="utf-8")
    assert result.findings, "every fixture has at least one site, so at least one finding"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_second_run_changes_nothing(case):
    after = (case / "after.py").read_bytes()
    again = migrate_fixture(after)
    assert again.source == after
    # What was migrated once is not reported as migrated again.
    assert not [f for f in again.findings if f.code == "PM100"]


# report_* cases show refused or removed forms; many cannot run on current JAX by design.
RUNNABLE = [
    c for c in CASES
    if not c.name.startswith("report_") and is_runnable((c / "before.py").read_bytes())
]


@pytest.mark.equivalence
@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_migrated_fixture_computes_the_same(case, tmp_path):
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    shutil.copy(case / "before.py", tmp_path / "orig" / "case.py")
    # What a module gets without a helper module: the helpers it needs, in the module.
    (tmp_path / "new" / "case.py").write_bytes(
        migrate_source((case / "before.py").read_bytes()).source)
    python = original_python((case / "before.py").read_bytes())
    original = run_entry(tmp_path / "orig", "case:run", devices=8, python=python)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    assert [str(d) for d in compare_outputs(original.output, migrated.output)] == []
