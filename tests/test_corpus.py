"""The bundled corpus: `apply` migrates every program, and each migrated program computes
the same outputs (values, shapes, dtypes, donation flags) as the original on 8 fake devices,
without pmap left behind, and without starting a backend at import time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import CORPUS, ROOT, original_python
from equivalence.compare import compare_outputs
from equivalence.runner import run_entry
from transforms.pipeline import migrate_source

PROGRAMS = sorted(p.stem for p in CORPUS.glob("*.py"))


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("migrated")
    completed = subprocess.run(
        # The corpus programs themselves; corpus/real/ is checked by .ci/run (its nested
        # pmaps need a human, PM206).
        [sys.executable, "-m", "migrator.cli", "apply", *map(str, sorted(CORPUS.glob("*.py"))),
         "--out-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stderr
    return out


def test_corpus_is_big_enough():
    assert len(PROGRAMS) >= 12


def test_every_corpus_site_is_migrated(migrated):
    for name in PROGRAMS:
        source = (migrated / f"{name}.py").read_bytes()
        left = [f.to_text() for f in migrate_source(source).findings]
        assert left == [], f"{name}: pmap references left after apply"
        assert b"def _pmap_style_shard_map(" in source, name


@pytest.mark.equivalence  # two JAX processes per program; .ci/run runs `pytest -m equivalence`
@pytest.mark.parametrize("name", PROGRAMS)
def test_migrated_program_matches_original(name, migrated):
    python = original_python((CORPUS / f"{name}.py").read_bytes())
    original = run_entry(CORPUS, f"{name}:run", devices=8, python=python)
    new = run_entry(migrated, f"{name}:run", devices=8)
    assert original.ok, original.error
    assert new.ok, new.error
    assert [str(d) for d in compare_outputs(original.output, new.output)] == []


def test_importing_migrated_modules_starts_no_backend(migrated):
    script = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(migrated)!r})\n"
        f"for name in {PROGRAMS!r}: importlib.import_module(name)\n"
        "from jax._src import xla_bridge\n"
        "print(json.dumps(sorted(xla_bridge._backends)))\n"
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    completed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []
