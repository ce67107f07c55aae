"""Every test notebook and late-import module, migrated in each style, runs top to bottom on 8
fake CPU devices.

A migrated notebook is run as a user runs it: its code cells in order, in one namespace
(tests/notebook_runner.py: IPython's own transformer for magics when IPython is installed,
the magic lines masked otherwise); a module runs as `__main__`. A name that code the migration
wrote reads before the program binds it stops the run with a NameError, as `@functools.cache`
over the mesh function did in a notebook that imports functools in a later cell
(tests/notebooks/late_imports.ipynb; the modules are tests/data/late_imports/). Where both
styles leave a `result`, the two agree. One process runs every program, so JAX starts once
(about 15 s in all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from migrator.notebooks import migrate_notebook
from migrator.options import MigrationOptions
from transforms.pipeline import migrate_source

TESTS = Path(__file__).resolve().parent
NOTEBOOKS = sorted((TESTS / "notebooks").glob("*.ipynb"))
LATE_IMPORT_MODULES = sorted((TESTS / "data" / "late_imports").glob("*.py"))
PROGRAMS = [*NOTEBOOKS, *LATE_IMPORT_MODULES]
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
