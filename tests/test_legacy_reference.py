"""Against the real legacy pmap: corpus originals run under jax 0.4.38 (the old pmap, in the
reference virtualenv) and the same programs migrated with --target-jax 0.4.38 (the
jax.experimental.shard_map spelling) run there too. Same interpreter, same XLA: outputs
must match, which checks the old-target output against the implementation users had."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import CORPUS, ROOT, legacy_python_or_skip
from equivalence.compare import compare_outputs
from equivalence.runner import run_entry

PROGRAMS = sorted(p.stem for p in CORPUS.glob("*.py"))


@pytest.fixture(scope="module")
def migrated_for_old_jax(tmp_path_factory):
    out = tmp_path_factory.mktemp("migrated_0_4_38")
    completed = subprocess.run(
        # The corpus programs themselves; corpus/real/ is checked by .ci/run (its nested
        # pmaps need a human, PM206, so `apply` exits 1 there).
        [sys.executable, "-m", "migrator.cli", "apply", *map(str, sorted(CORPUS.glob("*.py"))),
         "--out-dir", str(out), "--target-jax", "0.4.38"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stderr
    return out


@pytest.mark.equivalence  # two JAX processes per program; .ci/run runs `pytest -m equivalence`
@pytest.mark.parametrize("name", PROGRAMS)
def test_old_target_matches_legacy_pmap(name, migrated_for_old_jax):
    python = legacy_python_or_skip()
    original = run_entry(CORPUS, f"{name}:run", devices=8, python=python)
    migrated = run_entry(migrated_for_old_jax, f"{name}:run", devices=8, python=python)
    assert original.ok and original.jax_version == "0.4.38", original.error
    assert migrated.ok, migrated.error
    assert [str(d) for d in compare_outputs(original.output, migrated.output)] == []
