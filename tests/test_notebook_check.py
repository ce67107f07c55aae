"""`check --entry NAME.ipynb[:GLOBAL]`: a notebook's code cells run top to bottom in the
worker, IPython lines masked as the migrator masks them, and its final globals compared
(equivalence/notebook_entry.py, equivalence/worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from equivalence.layouts import inferred_layouts
from equivalence.notebook_entry import is_notebook_entry, masked_cells
from transforms.reading.ipython_lines import mask, unique_tag
from transforms.global_view.layout import MERGED, REPLICATED

HEADER = ("!pip install -q jax\n%matplotlib inline\nimport numpy as np\nimport jax\n"
          "import jax.numpy as jnp\nn = jax.local_device_count()\n")
STEP = ("%%time\n"
        "step = jax.pmap(lambda w, x: w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0) * w, 'i'),"
        " axis_name='i')\n"
        "w = jnp.stack([jnp.arange(4.0)] * n)\n"
        "data = np.random.RandomState(0).randn(n * 3, 4).astype(np.float32)\n"
        "xs = data.reshape(n, -1, 4)\n")
LOOP = ("for _ in range(3):\n    w = step(w, xs)\nhost_w = np.asarray(w[0])\n"
        "label = 'not an array'\n")


def write_notebook(path: Path, *code: str) -> Path:
    """A notebook (nbformat 4) with a markdown cell, then one code cell per text."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# A notebook\n"]}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": text.splitlines(True)} for text in code]
    notebook = {"cells": cells, "metadata": {"language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook, indent=1) + "\n")
    return path


def check(*arguments, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", *map(str, arguments), "--repeat", "1",
         "--report-json", str(report)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    results = json.loads(report.read_text())["results"] if report.exists() else []
    return run, results


def test_cells_are_masked_as_the_migrator_masks_them_and_numbered_as_jupyter_runs_them(tmp_path):
    notebook = write_notebook(tmp_path / "nb.ipynb", HEADER, "%%bash\necho hi\n", STEP)
    cells = masked_cells(notebook)
    tag = unique_tag(HEADER, "%%bash\necho hi\n", STEP)
    assert [cell["number"] for cell in cells] == [1, 2, 3]
    assert cells[0]["text"] == mask(HEADER, tag).text
    assert "!pip" not in cells[0]["text"] and cells[0]["text"].count("\n") == HEADER.count("\n")
    assert cells[1]["text"] is None  # %%bash: not Python, not run
    assert cells[2]["text"] == mask(STEP, tag).text
    assert is_notebook_entry("sub/nb.ipynb") and is_notebook_entry("nb.ipynb:w")
    assert not is_notebook_entry("nb:run")


def test_layouts_of_notebook_globals_are_read_off_the_shapes():
    def output(**shapes):
        return {"leaves": [{"path": path, "key": path, "shape": shape}
                           for path, shape in shapes.items()]}

    found = inferred_layouts(output(a=[8, 4], b=[8, 3, 4], c=[4], d=[2, 4]),
                             output(a=[4], b=[24, 4], c=[4], d=[4]), devices=8)
    assert [(layout.path, layout.kind) for layout in found] == [("a", REPLICATED), ("b", MERGED)]
    assert {layout.axis for layout in found} == {0}
    # A list of per-step values stacked by the original: the device axis is axis 1.
    found = inferred_layouts(output(m=[3, 8], x=[3, 8, 2, 4], s=[8, 8]),
                             output(m=[3], x=[3, 16, 4], s=[8]), devices=8)
    assert [(layout.path, layout.kind, layout.axis) for layout in found] == [
        ("m", REPLICATED, 1), ("x", MERGED, 1), ("s", REPLICATED, 0)]


@pytest.mark.equivalence
@pytest.mark.parametrize("style", ["faithful", "global"])
def test_a_notebook_is_checked_equivalent_in_both_styles(style, tmp_path):
    write_notebook(tmp_path / "project" / "nb.ipynb", HEADER, STEP, LOOP)
    run, results = check(tmp_path / "project", "--entry", "nb.ipynb", "--entry", "nb.ipynb:host_w",
                         "--devices", "8", "--style", style, tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [(r["entry"], r["verdict"]) for r in results] == [
        ("nb.ipynb", "equivalent"), ("nb.ipynb:host_w", "equivalent")]
    # Every global holding arrays, by name: data, host_w, w and xs; not n (an int), `label`
    # (a string), `step` or the modules.
    assert results[0]["outputs"]["details"]["leaves"] == 4
    if style == "global":  # the migrated notebook keeps w unstacked and xs merged
        notes = results[0]["layout"]["notes"]
        assert "['w']: replicated, row 0 of axis 0 compared" in notes
        assert "['xs']: merged axes 0 and 1" in notes


def test_a_notebook_whose_migrated_side_differs_is_reported_different(tmp_path):
    write_notebook(tmp_path / "original" / "nb.ipynb", HEADER, STEP, LOOP)
    write_notebook(tmp_path / "migrated" / "nb.ipynb", HEADER, STEP,
                   LOOP.replace("range(3)", "range(4)"))
    run, results = check(tmp_path / "original", tmp_path / "migrated", "--entry", "nb.ipynb:w",
                         "--devices", "2", tmp_path=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert results[0]["verdict"] == "different"
    assert results[0]["outputs"]["verdict"] == "different"


def test_a_raising_cell_is_reported_with_its_cell_number_and_line(tmp_path):
    write_notebook(tmp_path / "original" / "nb.ipynb", HEADER, STEP, LOOP)
    write_notebook(tmp_path / "migrated" / "nb.ipynb", HEADER, STEP,
                   LOOP.replace("host_w = np.asarray(w[0])", "host_w = 1 / 0"))
    run, results = check(tmp_path / "original", tmp_path / "migrated", "--entry", "nb.ipynb",
                         "--devices", "2", tmp_path=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert results[0]["verdict"] == "different"
    assert results[0]["migrated"]["error"] == (
        "cell 3, line 3: ZeroDivisionError: division by zero")
    assert "cell 3, line 3" in run.stdout
