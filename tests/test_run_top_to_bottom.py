"""Every test notebook and late-import module, migrated in each style, runs top to bottom on 8
fake CPU devices.

A migrated notebook is run as a user runs it: its code cells in order, in one namespace
(tests/notebook_runner.py: IPython's own transformer for magics when IPython is installed,
the magic lines masked otherwise); a module runs as `__main__`. A name that code the migration
wrote reads before the program binds it stops the run with a NameError, as `@functools.cache`
over the mesh function did in a notebook that imports functools in a later cell
(tests/notebooks/late_imports.ipynb; the modules are tests/data/late_imports/). Where both
styles leave a `result`, the two agree. One process runs every program, so JAX starts once
(about 15 s in all). corpus/real's notebooks, migrated in the global style, run the same way
from their own folders (marked slow: about 100 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, ROOT

from migrator.notebooks import migrate_notebook
from migrator.options import MigrationOptions
from transforms.pipeline import migrate_source

TESTS = Path(__file__).resolve().parent
NOTEBOOKS = sorted((TESTS / "notebooks").glob("*.ipynb"))
LATE_IMPORT_MODULES = sorted((TESTS / "data" / "late_imports").glob("*.py"))
PROGRAMS = [*NOTEBOOKS, *LATE_IMPORT_MODULES]
# corpus/real's notebooks, each in its folder with what it imports from there (vit_jax_colab's
# vit_jax package): migrated together in the global style, as `check` and a user migrate them
REAL = CORPUS / "real"
REAL_NOTEBOOKS = sorted([*REAL.glob("*.ipynb"), *REAL.glob("*/*.ipynb")])
STYLES = ("faithful", "global")
RUNNER = TESTS / "notebook_runner.py"


def migrated(path: Path, style: str) -> bytes:
    if path.suffix == ".ipynb":
        return migrate_notebook(path.read_bytes(), MigrationOptions(style=style)).source
    return migrate_source(path.read_bytes(), style=style).source


def run_programs(paths: list[Path], devices: int = 8) -> dict[str, dict]:
    """{path: {"error", "result"}} from tests/notebook_runner.py, in one subprocess whose
    XLA_FLAGS ask for `devices` CPU devices before JAX is imported."""
    out = paths[0].parent / "runs.json"
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu")
    completed = subprocess.run([sys.executable, str(RUNNER), str(out), *map(str, paths)],
                               env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
                               check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    folder = tmp_path_factory.mktemp("migrated")
    paths = {}
    for program in PROGRAMS:
        for style in STYLES:
            source = migrated(program, style)
            assert source != program.read_bytes(), (program.name, style)
            path = folder / f"{program.stem}_{style}{program.suffix}"
            path.write_bytes(source)
            paths[(program.name, style)] = path
    report = run_programs(list(paths.values()))
    return {key: report[str(path)] for key, path in paths.items()}


def test_late_imports_are_among_the_programs():
    names = [p.name for p in PROGRAMS]
    assert "late_imports.ipynb" in names and len(LATE_IMPORT_MODULES) >= 4


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("program", [p.name for p in PROGRAMS])
def test_migrated_program_runs_top_to_bottom(runs, program, style):
    run = runs[(program, style)]
    assert run["error"] is None, f"{program} ({style}):\n{run['error']}"
    assert run["result"] is not None, f"{program} ({style}) left no `result`"


@pytest.mark.parametrize("program", [p.name for p in PROGRAMS])
def test_both_styles_compute_the_same_result(runs, program):
    faithful, global_ = (runs[(program, style)]["result"] for style in STYLES)
    if faithful is None or global_ is None:
        pytest.skip("a run failed (see test_migrated_program_runs_top_to_bottom)")
    import numpy as np

    global_, faithful = np.asarray(global_), np.asarray(faithful)
    if global_.shape != faithful.shape and faithful.shape[1:] == global_.shape:
        # top-level code is a caller: a replicated stack it holds is one value in the global
        # style (the layout map's rule: equal rows, then row 0)
        np.testing.assert_array_equal(faithful, np.broadcast_to(faithful[0], faithful.shape))
        faithful = faithful[0]
    np.testing.assert_allclose(global_, faithful, rtol=1e-6)


def test_corpus_notebooks_are_among_the_real_notebooks():
    names = [p.relative_to(REAL).as_posix() for p in REAL_NOTEBOOKS]
    assert "blackjax_multiple_chains.ipynb" in names
    assert "vit_jax_colab/vit_jax_colab.ipynb" in names and len(names) >= 6


@pytest.mark.slow  # about 100 s: flax models on 8 devices; .ci/run runs it
def test_migrated_corpus_notebooks_run_top_to_bottom(tmp_path):
    """Each of corpus/real's notebooks, migrated with --style global (with the modules beside
    it), runs top to bottom from its own folder, as a kernel started there runs it. The
    migrated values are compared with the originals' by `check` (.ci/run); here a name a
    generated line reads before the notebook binds it would stop the run."""
    import flax_sides

    if flax_sides.side("current") is None:
        pytest.skip("flax for the current side: python tests/flax_sides.py")
    copy = tmp_path / "real"
    folders = sorted({p.parent for p in REAL_NOTEBOOKS})
    for folder in folders:
        target = copy / folder.relative_to(REAL)
        if folder == REAL:
            target.mkdir(parents=True)
            for notebook in REAL.glob("*.ipynb"):
                shutil.copy(notebook, target)
        else:
            shutil.copytree(folder, target, ignore=shutil.ignore_patterns("__pycache__"))
    applied = subprocess.run([sys.executable, "-m", "migrator.cli", "apply", "--style", "global",
                              str(copy)], capture_output=True, text=True, cwd=ROOT, check=False,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert applied.returncode == 0, applied.stdout[-2000:] + applied.stderr[-2000:]
    migrated = [copy / p.relative_to(REAL) for p in REAL_NOTEBOOKS]
    assert all(m.read_bytes() != p.read_bytes() for m, p in zip(migrated, REAL_NOTEBOOKS))
    for folder in {m.parent for m in migrated}:
        flax_sides.link_into(folder, "current")
    report = run_programs(migrated)
    errors = {m.relative_to(copy).as_posix(): report[str(m)]["error"] for m in migrated}
    assert errors == {name: None for name in errors}, errors
