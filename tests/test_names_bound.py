"""Every name a line the migration writes reads is bound before that line runs
(tests/bound_names.py, a static check with `ast`): in every fixture's reviewed after.py, in
every corpus program migrated in the global style, in every test notebook, corpus/real
notebook and late-import module migrated in either style (a notebook's cells read top to
bottom as one module), and in generated notebooks whose imports come in any cell. tests/test_run_top_to_bottom.py runs the
notebooks and modules themselves."""

from __future__ import annotations

import io
import json
import tokenize
from pathlib import Path

import pytest
from bound_names import unbound_reads
from conftest import CORPUS, fixture_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from notebook_runner import cell_python

from migrator.notebooks import migrate_notebook
from migrator.options import MigrationOptions
from transforms.pipeline import migrate_source

TESTS = Path(__file__).resolve().parent
FIXTURES = sorted(fixture_cases() + [p.parent for p in (TESTS / "fixtures_global").glob("*/before.py")])
CORPUS_PROGRAMS = sorted([*CORPUS.glob("*.py"), *(CORPUS / "real").glob("*.py"),
                          *(CORPUS / "real").glob("*/*.py")])  # and the package modules
NOTEBOOKS = sorted((TESTS / "notebooks").glob("*.ipynb"))
REAL_NOTEBOOKS = sorted([*(CORPUS / "real").glob("*.ipynb"), *(CORPUS / "real").glob("*/*.ipynb")])
LATE_IMPORT_MODULES = sorted((TESTS / "data" / "late_imports").glob("*.py"))
STYLES = ("faithful", "global")


def notebook_as_module(data: bytes) -> str:
    """The notebook's code cells, IPython lines masked, one after the other: the order a run
    from the top executes them in."""
    cells = json.loads(data)["cells"]
    texts = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
             for c in cells if c["cell_type"] == "code"]
    return "".join(code for code in map(cell_python, texts) if code is not None)


def text(data: bytes) -> str:
    """A module's text in the encoding it declares (a latin-1 coding cookie, a BOM)."""
    return data.decode(tokenize.detect_encoding(io.BytesIO(data).readline)[0])


def test_the_check_finds_a_mesh_function_above_the_functools_import():
    """What a notebook that imports functools in its second cell got before the fix."""
    original = "x = 1\nimport functools\nimport jax\n"
    migrated = ("x = 1\n@functools.cache\ndef _mesh(axis_name):\n    return jax.make_mesh()\n"
                "import functools\nimport jax\n")
    assert unbound_reads(original, migrated) == ["line 2: `functools` (read before anything "
                                                 "binds it)"]
    inside = "def _mesh():\n    return jax.make_mesh()\ndef run():\n    import jax\n"
    assert unbound_reads("def run():\n    import jax\n", inside) == [
        "line 2: `jax` (read in a function, bound nowhere at module level)"]
    # the user's own reads are not the migration's: `f` is bound nowhere in the original
    assert unbound_reads("import jax\ny = jax.pmap(f)(1)\n", "import jax\ny = g(f)(1)\n") == [
        "line 2: `g` (read before anything binds it)"]


@pytest.mark.parametrize("case", FIXTURES, ids=[f"{c.parent.name}/{c.name}" for c in FIXTURES])
def test_fixture_rewrites_bind_what_they_read(case):
    before, after = (text((case / name).read_bytes()) for name in ("before.py", "after.py"))
    assert unbound_reads(before, after) == []


@pytest.mark.parametrize("program", CORPUS_PROGRAMS, ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_corpus_in_the_global_style_binds_what_it_reads(program):
    source = program.read_bytes()
    assert unbound_reads(text(source), text(migrate_source(source, style="global").source)) == []


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_bind_what_they_read(notebook, style):
    data = notebook.read_bytes()
    new = migrate_notebook(data, MigrationOptions(style=style)).source
    assert unbound_reads(notebook_as_module(data), notebook_as_module(new)) == []


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("notebook", REAL_NOTEBOOKS,
                         ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_corpus_notebooks_bind_what_they_read(notebook, style):
    """corpus/real's notebooks, each read alone (test_run_top_to_bottom.py runs them
    migrated with the modules beside them)."""
    data = notebook.read_bytes()
    new = migrate_notebook(data, MigrationOptions(style=style)).source
    assert new != data
    assert unbound_reads(notebook_as_module(data), notebook_as_module(new)) == []


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("module", LATE_IMPORT_MODULES, ids=lambda p: p.name)
def test_modules_with_late_imports_bind_what_they_read(module, style):
    source = module.read_bytes()
    new = migrate_source(source, style=style).source
    assert new != source
    assert unbound_reads(text(source), text(new)) == []


IMPORTS_CELL = "import functools\nimport numpy as np\nimport jax"
PROGRAM_CELLS = [
    "@functools.partial(jax.pmap, axis_name='b', donate_argnums=(0,))\ndef gstep(v):\n"
    "    return jax.lax.psum(v, 'b')",
    "def grun():\n    n = jax.local_device_count()\n"
    "    x = np.ones((n * 2, 3), np.float32).reshape(n, -1, 3)\n    return gstep(x)[0]",
    "ys = jax.pmap(lambda x, w: x * w, in_axes=(0, None))(np.ones((2, 2)), 2.0)",
    "params = jax.device_put_replicated(np.ones(2), jax.local_devices())",
    "from jax.sharding import Mesh",
    "from functools import partial",
    "N = 3",
    "out = grun()",
]


def _notebook(cells: list[str]) -> bytes:
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                   "outputs": [], "source": cell.splitlines(True)} for i, cell in enumerate(cells)],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }).encode()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PROGRAM_CELLS), min_size=1, max_size=5), st.integers(0, 5),
       st.sampled_from(STYLES))
def test_generated_notebooks_bind_what_they_read(cells, imports_at, style):
    """Wherever the imports cell comes (first, after the code, or not at all), the lines the
    migration writes read only names bound above them."""
    cells = list(cells)
    if imports_at < len(cells) + 1:
        cells.insert(imports_at, IMPORTS_CELL)
    data = _notebook(cells)
    new = migrate_notebook(data, MigrationOptions(style=style)).source
    assert unbound_reads(notebook_as_module(data), notebook_as_module(new)) == []
