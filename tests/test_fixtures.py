"""Fixture pairs: before.py -> after.py with expected findings, for every form and argument.

Each case is checked three ways: the rewrite is exactly the reviewed after.py, the findings
are exactly findings.txt, and a second run changes nothing (idempotency). Runnable cases are
also executed on 8 fake devices, original and migrated, and must give the same outputs.
"""

from __future__ import annotations

import shutil

import pytest

from conftest import fixture_cases, is_runnable, original_python
from equivalence.compare import compare_outputs
from equivalence.runner import run_entry
from regen_fixtures import findings_text
from transforms.pipeline import migrate_source

CASES = fixture_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_matches_reviewed_fixture(case):
    result = migrate_source((case / "before.py").read_bytes())
    assert result.source == (case / "after.py").read_bytes()
    assert findings_text(result.findings) == (case / "findings.txt").read_text(encoding="utf-8")
    assert result.findings, "every fixture has at least one site, so at least one finding"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_second_run_changes_nothing(case):
    after = (case / "after.py").read_bytes()
    again = migrate_source(after)
    assert again.source == after
    # What was migrated once is not reported as migrated again.
    assert not [f for f in again.findings if f.code == "PM100"]


# report_* cases show refused or removed forms; many cannot run on current JAX by design.
RUNNABLE = [
    c for c in CASES
    if not c.name.startswith("report_") and is_runnable((c / "before.py").read_bytes())
]


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_migrated_fixture_computes_the_same(case, tmp_path):
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    shutil.copy(case / "before.py", tmp_path / "orig" / "case.py")
    shutil.copy(case / "after.py", tmp_path / "new" / "case.py")
    python = original_python((case / "before.py").read_bytes())
    original = run_entry(tmp_path / "orig", "case:run", devices=8, python=python)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    assert [str(d) for d in compare_outputs(original.output, migrated.output)] == []
