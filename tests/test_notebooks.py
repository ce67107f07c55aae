"""Jupyter notebooks: every code cell is migrated, IPython lines, outputs, metadata and the JSON
layout are kept, the helper is defined once, findings point at their cell, a second run
changes nothing, a broken cell is reported while the rest migrates, and the migrated
notebook computes what the original did on 8 fake devices."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from conftest import LEGACY_PYTHON, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrator.notebook_json import NotebookError
from migrator.notebooks import migrate_notebook
from migrator.options import MigrationOptions
from transforms.pipeline import migrate_source

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
DATA_PARALLEL = NOTEBOOKS / "data_parallel.ipynb"
HELPER_DEF = (  # the marker comment, then the definition
    "# pmap-migrate: helper (plain JAX, safe to keep; see the pmap-migrate rules reference)\n"
    "def _pmap_style_shard_map("
)
HELPER_NAME = "_pmap_style_shard_map"
GLOBAL = MigrationOptions(style="global")


# -- helpers ----------------------------------------------------------------------------------


def notebook(*cells, language="python", **layout) -> bytes:
    """A notebook from ("code" | "markdown", source) pairs, written like nbformat by default."""
    nb = {
        "cells": [
            {"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": source,
             **({"execution_count": None, "outputs": []} if kind == "code" else {})}
            for i, (kind, source) in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "K", "language": language, "name": "k"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    layout = {"indent": 1, "sort_keys": True, "ensure_ascii": False, **layout}
    return (json.dumps(nb, **layout) + "\n").encode("utf-8")


def code(*lines: str) -> tuple[str, list[str]]:
    """A code cell whose source is stored as nbformat stores it: lines with their newlines."""
    text = "\n".join(lines)
    return ("code", text.splitlines(True))


def sources(data: bytes) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in json.loads(data)["cells"]]


def ipython_lines(text: str) -> list[str]:
    """Lines IPython rewrites (magics, shell escapes, help), found independently of the tool."""
    return [
        line for line in text.splitlines()
        if line.lstrip()[:1] in ("%", "!", "?") or line.rstrip().endswith("?")
        or re.match(r"\s*\w+\s*=\s*[!%]", line)
    ]


def validate(data: bytes) -> None:
    nbformat.validate(nbformat.reads(data.decode("utf-8"), as_version=4))


def helper_cells(data: bytes) -> list[int]:
    return [i for i, text in enumerate(sources(data)) if HELPER_DEF in text]


def assert_helper_once_before_use(data: bytes) -> None:
    texts = sources(data)
    defining = helper_cells(data)
    using = [i for i, t in enumerate(texts) if HELPER_NAME in t.replace(HELPER_DEF, "")]
    if not using:
        assert defining == []
        return
    assert len(defining) == 1, f"helper defined in cells {defining}"
    assert sum(t.count(HELPER_DEF) for t in texts) == 1
    assert defining[0] <= using[0], "helper used before the cell that defines it"
    lines = texts[defining[0]].splitlines()
    def_line = next(n for n, line in enumerate(lines) if line.startswith("def _pmap_style_shard_map("))
    uses = [n for n, line in enumerate(lines) if HELPER_NAME in line and n != def_line
            and not line.startswith(" ")]  # top-level uses run at once; function bodies later
    assert all(def_line < n for n in uses), "helper used before its definition in the cell"


@pytest.fixture(scope="module")
def original() -> bytes:
    return DATA_PARALLEL.read_bytes()


@pytest.fixture(scope="module")
def migrated(original):
    return migrate_notebook(original)


# -- the bundled notebook -----------------------------------------------------------------------


def test_migrated_notebook_is_valid_and_has_no_pmap_left(original, migrated):
    validate(original)
    validate(migrated.source)
    assert migrated.source != original
    new = sources(migrated.source)
    for i, cell in enumerate(json.loads(migrated.source)["cells"]):
        if cell["cell_type"] != "code":
            continue
        python = [l for l in new[i].splitlines() if l not in ipython_lines(new[i])]
        assert not any(re.search(r"jax\.pmap\b(?!')", l) for l in python), (i, new[i])


def test_ipython_lines_are_kept_byte_for_byte(original, migrated):
    old, new = sources(original), sources(migrated.source)
    assert sum(len(ipython_lines(t)) for t in old) == 7
    for before, after in zip(old, new):
        assert ipython_lines(after) == ipython_lines(before)
    # The cell magic is still the first line of its cell, and the shell escape in the loop
    # keeps its indentation.
    assert new[4].startswith("%%time\n@functools.partial(_pmap_style_shard_map, ")
    assert "for i in range(2):\n    !echo step {i}\n    scaled = scale(shares, 3.0)\n" in new[5]
    assert new[5].endswith("\n%time _ = jax.pmap(jnp.sin)(xs)")


def test_outputs_ids_and_metadata_are_untouched(original, migrated):
    old, new = json.loads(original), json.loads(migrated.source)
    assert {k: v for k, v in old.items() if k != "cells"} == {k: v for k, v in new.items() if k != "cells"}
    assert len(old["cells"]) == len(new["cells"])
    changed = {i for i, _, _ in migrated.cell_diffs}
    assert changed == {2, 4, 5}
    for i, (before, after) in enumerate(zip(old["cells"], new["cells"])):
        assert {k: v for k, v in before.items() if k != "source"} == {
            k: v for k, v in after.items() if k != "source"}
        if i not in changed:
            assert before["source"] == after["source"]
        assert isinstance(after["source"], list)
        assert after["source"] == "".join(after["source"]).splitlines(True)


def test_json_layout_is_nbformats(migrated):
    text = migrated.source.decode("utf-8")
    assert "Données parallèles — π" in text and "Zoë" in text  # not \u-escaped
    assert text == nbformat.writes(nbformat.reads(text, as_version=4)) + "\n"


def test_helper_defined_once_before_first_use(migrated):
    assert helper_cells(migrated.source) == [2]
    assert_helper_once_before_use(migrated.source)
    cell = sources(migrated.source)[2]
    assert cell.startswith('!pip install -q "jax[cpu]"\n\n\n' + HELPER_DEF)
    assert cell.index(HELPER_DEF) < cell.index("doubled = _pmap_style_shard_map(")


def test_findings_point_at_their_cell_and_line(migrated):
    got = [(cell, f.code, f.line, f.col) for f, cell in zip(migrated.findings, migrated.cell_of)]
    assert got == [
        (2, "PM100", 4, 11),
        (4, "PM100", 2, 2),
        (5, "PM100", 2, 9),
        (5, "PM205", 6, 15),  # pmap inside `%time`: kept as it is, and said so
    ]
    assert len(migrated.findings) == len(migrated.cell_of)


def test_second_run_changes_nothing(migrated):
    again = migrate_notebook(migrated.source)
    assert again.source == migrated.source
    assert again.cell_diffs == []
    assert [f.code for f in again.findings] == ["PM205"]


def test_cell_diffs_hold_old_and_new_sources(original, migrated):
    old, new = sources(original), sources(migrated.source)
    for index, before, after in migrated.cell_diffs:
        assert before == old[index] and after == new[index] and before != after


# -- cells that break, cells that are not Python --------------------------------------------------


def test_broken_cell_is_reported_and_left_while_others_migrate():
    broken = "y = jax.pmap(f)(x\nz = 1\n"
    data = notebook(
        code("import jax", "f = lambda v: v"),
        ("code", broken),
        ("markdown", "text"),
        code("%time", "y = jax.pmap(f)(x)"),
    )
    result = migrate_notebook(data)
    new = sources(result.source)
    assert new[1] == broken
    assert new[3].startswith("%time\n\n\n" + HELPER_DEF)
    assert new[3].endswith("\ny = _pmap_style_shard_map(f)(x)")
    pm001 = [(c, f.line) for f, c in zip(result.findings, result.cell_of) if f.code == "PM001"]
    assert pm001 == [(1, 1)]  # the unclosed bracket, on line 1 of cell 1
    assert [(c, f.code) for f, c in zip(result.findings, result.cell_of) if f.code != "PM001"] == [
        (3, "PM100")]
    validate(result.source)


def test_non_python_cell_magics_are_left_alone():
    cells = [
        code("%%bash", "echo jax.pmap", "!weird ?"),
        code("%%writefile step.py", "import jax", "step = jax.pmap(f)"),
        code("%%html", "<b>jax.pmap</b>"),
    ]
    data = notebook(*cells)
    result = migrate_notebook(data)
    assert result.source == data
    assert result.findings == [] and result.cell_diffs == []


def test_python_cell_magics_are_migrated_below_the_magic_line():
    data = notebook(
        code("import jax"),
        code("", "%%capture out --no-stderr", "x = jax.pmap(f, in_axes=(0, None))(a, b)"),
        code("%%prun -s cumulative", "y = jax.pmap(f)(a)"),
    )
    new = sources(migrate_notebook(data).source)
    assert new[1].startswith("\n%%capture out --no-stderr\nfrom jax.sharding import PartitionSpec as P\n")
    assert new[2].startswith("%%prun -s cumulative\ny = _pmap_style_shard_map(f)(a)")


def test_timeit_cell_does_not_define_the_helper_for_later_cells():
    # %%timeit runs its body in a function scope: a helper defined there is gone afterwards.
    data = notebook(code("import jax"), code("%%timeit", "jax.pmap(f)(x)"), code("y = jax.pmap(g)(x)"))
    result = migrate_notebook(data)
    assert helper_cells(result.source) == [1, 2]
    # ... but it can use one defined before it.
    data = notebook(code("import jax"), code("y = jax.pmap(g)(x)"), code("%%timeit", "jax.pmap(f)(x)"))
    result = migrate_notebook(data)
    assert helper_cells(result.source) == [1]
    assert sources(result.source)[2] == "%%timeit\n_pmap_style_shard_map(f)(x)"


def test_ipython_look_alikes_inside_strings_and_brackets_are_python():
    cell = textwrap.dedent('''\
        import jax
        doc = """
        !not a shell escape
        %not a magic
        what?
        """
        x = (10
             % 3)
        z = 10 \\
            % 4
        y = jax.pmap(f)(doc)''')
    result = migrate_notebook(notebook(("code", cell)))
    assert [f.code for f in result.findings] == ["PM100"]
    new = sources(result.source)[0]
    assert new.endswith(cell.split("x = (10", 1)[1].replace("jax.pmap", HELPER_NAME))
    assert '"""\n!not a shell escape\n%not a magic\nwhat?\n"""' in new


def test_every_kind_of_ipython_line_survives():
    lines = [
        "import jax",
        "%load_ext autoreload",
        "%autoreload 2",
        "files = !ls -la",
        "out = %timeit -o -q jnp.ones(3)",
        "!!echo twice",
        "?jax.jit",
        "jax.jit??",
        "%%not_first_line  # a line magic here",
        "for k in range(2):",
        "    %time k ** 2",
        "    !echo \\",
        "      continued $k",
        "    y = jax.pmap(f)(k)",
        "/print 1",
        ",print a b",
        ";print a b",
    ]
    data = notebook(code(*lines))
    result = migrate_notebook(data)
    assert [f.code for f in result.findings] == ["PM100"]
    new = sources(result.source)[0]
    kept = [l for l in lines if l.lstrip()[:1] in "%!?/,;" or "= !" in l or "= %" in l
            or l.endswith("?") or l.startswith("      continued")]
    assert len(kept) == 14
    for line in kept:
        assert ("\n" + line + "\n") in ("\n" + new + "\n"), line
    assert "    y = _pmap_style_shard_map(f)(k)" in new


# -- the notebook as a whole: JSON layout, names across cells ---------------------------------


LAYOUTS = {
    "indent-2-ascii-crlf": lambda nb: json.dumps(nb, indent=2, ensure_ascii=True).replace("\n", "\r\n"),
    "compact": lambda nb: json.dumps(nb, separators=(",", ":"), ensure_ascii=False),
    "tabs-bom-blank-lines": lambda nb: "\ufeff" + json.dumps(nb, indent="\t", ensure_ascii=False) + "\n\n",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_other_json_layouts_are_kept(layout):
    """Keys not sorted, string sources, and each layout's indent, escapes, line ends and ends."""
    dump = LAYOUTS[layout]
    nb = {
        "nbformat": 4, "nbformat_minor": 4,
        "metadata": {"colab": {"name": "Démo"}, "kernelspec": {"name": "python3", "language": "python",
                                                               "display_name": "P"}},
        "cells": [
            {"cell_type": "code", "metadata": {"id": "x1"}, "execution_count": 3,
             "source": "import jax\nys = jax.pmap(f)(xs)  # é", "outputs": []},
            {"cell_type": "markdown", "metadata": {}, "source": "ünchanged"},
        ],
    }
    data = dump(nb).encode()
    result = migrate_notebook(data)
    [(index, _, new)] = result.cell_diffs
    assert index == 0 and "ys = _pmap_style_shard_map(f)(xs)  # é" in new
    nb["cells"][0]["source"] = new
    assert result.source == dump(nb).encode()
    validate(result.source.removeprefix("\ufeff".encode()))
    assert migrate_notebook(result.source).source == result.source


def test_unchanged_notebook_comes_back_as_the_same_bytes():
    data = notebook(code("import jax", "%time y = jax.jit(f)(x)"), ("markdown", "jax.pmap(f)"),
                    indent=4, sort_keys=False)
    data = data.replace(b'"nbformat_minor": 5', b'"nbformat_minor": 5.0e0')  # no json round trip
    result = migrate_notebook(data)
    assert result.source is data
    assert result.findings == [] and result.cell_diffs == []


def test_other_kernel_languages_are_left_alone():
    data = notebook(code("jax.pmap(f)"), language="julia")
    assert migrate_notebook(data).source == data


def test_names_imported_in_earlier_cells_are_resolved():
    data = notebook(
        code("import jax as j", "from foo import bar as P"),
        ("markdown", "P is taken"),
        code("s = j.pmap(f, in_axes=(0, None))(a, b)"),
    )
    result = migrate_notebook(data)
    new = sources(result.source)[2]
    assert [(c, f.code) for f, c in zip(result.findings, result.cell_of)] == [(2, "PM100")]
    assert "in_specs=(jax.sharding.PartitionSpec(" in new and "import jax\n" in new


def test_names_from_earlier_cells_resolve_at_cell_level():
    # libcst resolves a module-level name only to bindings above it: the context must be
    # in front of the cell's code, or these sites would go unseen.
    data = notebook(
        code("from functools import partial", "from jax import pmap, tree_map"),
        code("@partial(pmap, axis_name='i')", "def step(x):", "    return x", "",
             "y = pmap(g)(xs)", "t = tree_map(f, t)"),
    )
    result = migrate_notebook(data)
    got = [(c, f.code, f.line) for f, c in zip(result.findings, result.cell_of)]
    assert got == [(1, "PM100", 1), (1, "PM100", 5), (1, "PM304", 6)]
    assert "@partial(_pmap_style_shard_map, axis_name='i')\ndef step(x):" in sources(result.source)[1]


CONTEXT_FREE_CELLS = [
    "import jax\nx = jax.pmap(f, in_axes=(0, None))(a, b)",
    "import jax\n\n# build the step\n\n\n@jax.pmap\ndef step(v):\n    return v\n",
    (
        "# a title comment\nimport jax\nimport functools\n# why\n"
        "@functools.partial(jax.pmap, axis_name='b')\ndef g(v):\n    return v\nz = g(xs)  # trailing"
    ),
    '"""Docstring."""\nimport jax\nfrom jax.sharding import Mesh\ny = jax.pmap(f, in_axes=0)(a)',
    "import jax\nfrom jax import pmap\nstep = pmap(f)\n\n\n",
]


def _no_pmap_helper(text: str) -> str:
    """`text` without the body of `_pmap_style_shard_map`: a notebook gets the helper with every
    feature (transforms/helpers/helper_features.py), a .py file the features its sites use."""
    return re.sub(r"(?m)^def _pmap_style_shard_map\($.*?^(?=[^\s)])", "def _pmap_style_shard_map:\n",
                  text, flags=re.DOTALL)


@pytest.mark.parametrize("cell", CONTEXT_FREE_CELLS)
def test_context_leaves_no_trace(cell):
    """A cell migrated after other cells reads as if migrated alone, as a .py file would."""
    alone = sources(migrate_notebook(notebook(("code", cell))).source)[0]
    assert _no_pmap_helper(alone) == _no_pmap_helper(migrate_source(cell.encode()).source.decode())
    after_others = notebook(
        code("import functools", "import numpy as np", "from jax import numpy as jnp",
             "from jax import pmap"),
        ("code", cell),
    )
    result = migrate_notebook(after_others)
    assert sources(result.source)[1] == alone
    assert [(f.code, f.line, f.col) for f, c in zip(result.findings, result.cell_of) if c == 1] == [
        (f.code, f.line, f.col) for f in migrate_source(cell.encode()).findings]


def test_import_removed_only_when_no_later_cell_needs_it():
    used_later = notebook(code("from jax import pmap", "f = pmap(g)"), code("table = {'p': pmap}"))
    result = migrate_notebook(used_later)
    assert sources(result.source)[0].startswith("from jax import pmap\n")
    assert [(c, f.code) for f, c in zip(result.findings, result.cell_of)] == [(0, "PM100"), (1, "PM205")]

    migrated_later = notebook(code("from jax import pmap", "f = pmap(g)"), code("h = pmap(k)"))
    result = migrate_notebook(migrated_later)
    first, second = sources(result.source)
    assert "import pmap" not in first and second == "h = _pmap_style_shard_map(k)"
    assert_helper_once_before_use(result.source)


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[1, 2]", b'{"cells": "x", "nbformat": 4}', b'{"nbformat": 4}',
     b'{"worksheets": [], "nbformat": 3, "cells": []}', b'{"cells": [{"source": 3}], "nbformat": 4}',
     b"\xff\xfe{}"],
)
def test_not_a_notebook_raises(data):
    with pytest.raises(NotebookError):
        migrate_notebook(data)


# -- properties over generated notebooks --------------------------------------------------------

SNIPPETS = [
    "import jax\nimport functools",
    "%matplotlib inline\nimport jax",
    "!pip install jax\nx = jax.pmap(f)(xs)",
    "%%time\ny = jax.pmap(lambda v: v, in_axes=(0,))(xs)",
    "%%capture\n@jax.pmap\ndef g(v):\n    return v",
    "for i in range(3):\n    %time step(i)\n    z = jax.pmap(f, axis_name='i')(xs)",
    "jax.pmap?\nw = jax.pmap(f, in_axes=(0, None), out_axes=0)(xs, 1)",
    "@functools.partial(jax.pmap, axis_name='b')\ndef h(v):\n    return v",
    "broken = jax.pmap(f)(",
    "%%bash\necho jax.pmap",
    "q = 1  # what?",
    "t = jax.tree_map(f, t)",
]


@st.composite
def notebooks(draw):
    cells = []
    for snippet in draw(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=6)):
        kind = draw(st.sampled_from(["code", "code", "code", "markdown"]))
        stored = snippet.splitlines(True) if draw(st.booleans()) else snippet
        cells.append((kind, stored))
    return notebook(*cells)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebooks())
def test_generated_notebooks(data):
    result = migrate_notebook(data)
    validate(result.source)
    assert migrate_notebook(result.source).source == result.source
    old_cells, new_cells = json.loads(data)["cells"], json.loads(result.source)["cells"]
    for before, after in zip(old_cells, new_cells):
        assert type(before["source"]) is type(after["source"])
        assert ipython_lines("".join(before["source"])) == ipython_lines("".join(after["source"]))
        if before["cell_type"] != "code" or "broken" in "".join(before["source"]):
            assert before == after
    assert_helper_once_before_use(result.source)
    for finding, cell in zip(result.findings, result.cell_of):
        assert old_cells[cell]["cell_type"] == "code"
        assert 1 <= finding.line <= len("".join(old_cells[cell]["source"]).splitlines())


GLOBAL_PROGRAM = [  # cells that go global together (PM600)
    "import functools\nimport numpy as np\nimport jax",
    "@functools.partial(jax.pmap, axis_name='b')\ndef gstep(v):\n    return jax.lax.psum(v, 'b')",
    "def grun():\n    n = jax.local_device_count()\n"
    "    x = np.ones((n * 2, 3), np.float32).reshape(n, -1, 3)\n    return gstep(x)[0]",
]
GLOBAL_SNIPPETS = [*SNIPPETS, *GLOBAL_PROGRAM, "%time out = grun()", "out = grun()"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.lists(st.sampled_from(GLOBAL_SNIPPETS), min_size=1, max_size=5))
def test_generated_notebooks_in_the_global_style(program_first, snippets):
    """Whatever the cells, the global style gives a valid notebook that a second run leaves
    alone, IPython lines and other cells kept, findings inside their cell, no tool error."""
    snippets = [*GLOBAL_PROGRAM, *snippets] if program_first else snippets
    data = notebook(*(code(*snippet.splitlines()) for snippet in snippets))
    result = migrate_notebook(data, GLOBAL)
    validate(result.source)
    assert migrate_notebook(result.source, GLOBAL).source == result.source
    old_cells, new_cells = json.loads(data)["cells"], json.loads(result.source)["cells"]
    for before, after in zip(old_cells, new_cells):
        assert ipython_lines("".join(before["source"])) == ipython_lines("".join(after["source"]))
        if "broken" in "".join(before["source"]) or "%%bash" in "".join(before["source"]):
            assert before == after
    assert_helper_once_before_use(result.source)
    assert "".join(sources(result.source)).count("def _mesh(") <= 1
    for finding, cell in zip(result.findings, result.cell_of):
        assert finding.code != "PM005", finding
        assert 1 <= finding.line <= len("".join(old_cells[cell]["source"]).splitlines())


# -- end to end: the migrated notebook computes what the original did ---------------------------

RUN_CELLS = textwrap.dedent(r'''
    import json, re, sys
    import numpy as np

    PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun"}
    nb = json.load(open(sys.argv[1], encoding="utf-8"))
    namespace = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        if lines and lines[0].startswith("%%"):
            if lines[0][2:].split()[0] not in PYTHON_CELL_MAGICS:
                continue
            lines = lines[1:]
        lines = [  # magics, shell escapes and help lines are not run: `pass` keeps the blocks
            re.match(r"\s*", l).group(0) + "pass"
            if l.lstrip()[:1] in ("%", "!", "?") or l.rstrip().endswith("?") else l
            for l in lines
        ]
        exec(compile("\n".join(lines), "<cell>", "exec"), namespace)
    np.save(sys.argv[2], np.asarray(namespace["result"]))
''')


def _run_notebook(python: str, path: Path, out: Path) -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    completed = subprocess.run(
        [python, "-c", RUN_CELLS, str(path), str(out)],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]


def test_migrated_notebook_computes_what_the_original_did(tmp_path, original, migrated):
    import numpy as np

    # The original runs on the legacy pmap when that interpreter exists, else on JAX's own.
    reference = LEGACY_PYTHON if Path(LEGACY_PYTHON).exists() else sys.executable
    (tmp_path / "original.ipynb").write_bytes(original)
    (tmp_path / "migrated.ipynb").write_bytes(migrated.source)
    _run_notebook(reference, tmp_path / "original.ipynb", tmp_path / "original.npy")
    _run_notebook(sys.executable, tmp_path / "migrated.ipynb", tmp_path / "migrated.npy")
    before, after = np.load(tmp_path / "original.npy"), np.load(tmp_path / "migrated.npy")
    assert before.shape == (8,) and before.dtype == np.float32
    np.testing.assert_array_equal(after, before)


def test_every_helper_is_given_to_one_cell_only():
    """Cells that each need the placement and unreplicate helpers get them once, in the first
    cell that needs them; later cells use that definition."""
    cells = [
        "import jax\nimport numpy as np\n",
        "p = jax.pmap(lambda x: x * 2, axis_name='i')\n"
        "x = jax.device_put_replicated(np.ones(2), jax.local_devices())\n"
        "print(float(p(x)[0]))\n",
        "q = jax.pmap(lambda x: x + 1, axis_name='i')\n"
        "y = jax.device_put_replicated(np.zeros(2), jax.local_devices())\n"
        "print(float(q(y)[0]))\n",
    ]
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": text.splitlines(keepends=True)} for text in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    migration = migrate_notebook(json.dumps(notebook).encode())
    sources = ["".join(c["source"]) for c in json.loads(migration.source)["cells"]]
    for helper in ("_pmap_style_shard_map", "_device_put_replicated", "_first_replica"):
        defined = [i for i, text in enumerate(sources) if f"def {helper}(" in text]
        assert defined == [1], (helper, defined)
        assert f"{helper}(" in sources[2]


# -- --style global: the notebook's cells are one module ----------------------------------------

GLOBAL_TRAINING = NOTEBOOKS / "global_training.ipynb"


def _code_lines(text: str) -> list[str]:
    """Lines that are neither blank nor IPython: what a notebook and a .py module share."""
    return [line for line in text.splitlines() if line.strip() and line not in ipython_lines(text)]


@pytest.fixture(scope="module")
def migrated_global():
    return migrate_notebook(GLOBAL_TRAINING.read_bytes(), GLOBAL)


def test_global_style_reaches_across_cells(migrated_global):
    """A step defined in one cell and driven from a function in another goes global, as the
    same code does in a .py module: PM600 at each site, no faithful helper, one mesh."""
    validate(migrated_global.source)
    texts = sources(migrated_global.source)
    found = [(cell, f.code, f.line) for f, cell in zip(migrated_global.findings, migrated_global.cell_of)]
    assert found == [(2, "PM600", 1), (3, "PM600", 1)]
    code = "".join(texts)
    assert HELPER_NAME not in code and "jax.pmap" not in code
    assert code.count("def _mesh(") == 1 and "def _mesh(" in texts[2]
    assert "from jax.sharding import" in texts[1]  # the imports cell, after its imports
    assert texts[1].startswith("%matplotlib inline\n")
    assert "params = jax.device_put(" in texts[5] and "float(loss)" in texts[5]
    for before, after in zip(sources(GLOBAL_TRAINING.read_bytes()), texts):
        # a cell keeps its own padding: nothing the module-wide pass adds at a boundary
        assert after.startswith("\n") == before.startswith("\n")
        assert after.endswith("\n") == before.endswith("\n")


def test_global_notebook_matches_the_global_py_module(migrated_global):
    """Cell by cell, the notebook gets the code its cells get as one .py module."""
    cells = sources(GLOBAL_TRAINING.read_bytes())
    module = "\n\n".join(text for text in cells[1:] if not text.startswith("#")) + "\n"
    module = "\n".join(line for line in module.splitlines() if line not in ipython_lines(module))
    expected = migrate_source(module.encode(), style="global")
    assert [f.code for f in expected.findings] == ["PM600", "PM600"]
    got = "\n".join(text for text in sources(migrated_global.source)[1:] if not text.startswith("#"))
    assert _code_lines(got) == _code_lines(expected.source.decode())


def test_global_notebook_computes_what_the_original_did(tmp_path, migrated_global):
    import numpy as np

    reference = LEGACY_PYTHON if Path(LEGACY_PYTHON).exists() else sys.executable
    (tmp_path / "original.ipynb").write_bytes(GLOBAL_TRAINING.read_bytes())
    (tmp_path / "migrated.ipynb").write_bytes(migrated_global.source)
    _run_notebook(reference, tmp_path / "original.ipynb", tmp_path / "original.npy")
    _run_notebook(sys.executable, tmp_path / "migrated.ipynb", tmp_path / "migrated.npy")
    before, after = np.load(tmp_path / "original.npy"), np.load(tmp_path / "migrated.npy")
    assert before.shape == (7,)
    np.testing.assert_allclose(after, before, rtol=1e-6)


def test_global_style_in_a_notebook_says_why_each_site_has_no_global_layout(original):
    """Module-level calls (most notebooks) keep pmap's layouts, never silently: each site keeps
    pmap's calling contract without the helper (PM612), one finding that names the blocker
    (its PM6xx code, and its cell and line when elsewhere), naming cells rather than lines of
    the joined module. An IPython line reading a
    notebook name does not stop that: no value changes layout."""
    result = migrate_notebook(original, GLOBAL)
    assert b"_pmap_style_shard_map" not in result.source
    by_cell = {}
    for finding, cell in zip(result.findings, result.cell_of):
        by_cell.setdefault((cell, finding.line), []).append(finding)
    sites = [key for key, found in by_cell.items() if any(f.code == "PM612" for f in found)]
    assert len(sites) == 3
    for key in sites:
        (finding,) = by_cell[key]  # one finding per site, the blocker inside
        assert re.search(r" \(PM6(0\d|10)(, cell \d+, line \d+)?\)$", finding.message), finding
    elsewhere = [f.message for f in result.findings if f.code == "PM612" and ", line " in f.message]
    assert elsewhere and all(re.search(r"\(PM6\d\d, cell \d+, line \d+\)$", m) for m in elsewhere)


STEP_AND_CALLER = textwrap.dedent('''\
        import functools

        import jax
        import jax.numpy as jnp
        import numpy as np


        @functools.partial(jax.pmap, axis_name="i")
        def step(x):
            return jax.lax.psum(x, "i")


        def run():
            n = jax.local_device_count()
            x = np.ones((n * 2, 3), np.float32).reshape(n, -1, 3)
            return step(x)[0]
        ''')


def _two_cell_notebook(second: str) -> bytes:
    return notebook(code(*STEP_AND_CALLER.splitlines()), code(*second.splitlines()))


@pytest.mark.parametrize("second, reason", [
    ("%time out = run()", "reads `run`"),
    ("out = run(\n", "does not parse"),
    ("%%timeit\nimport jax\nrun()", None),
    ("\n%%time\ntime = 1\nrun()", None),  # a cell magic's own words are not a read
])
def test_global_style_falls_back_with_pm607_where_a_notebook_is_not_one_module(second, reason):
    data = _two_cell_notebook(second)
    alone = migrate_source(sources(data)[0].encode(), style="global")
    assert "PM600" in [f.code for f in alone.findings]  # as a module, the first cell goes global
    result = migrate_notebook(data, GLOBAL)
    codes = [f.code for f in result.findings]
    if reason is None:  # a %%timeit cell the global pass does not touch: no reason to refuse
        assert "PM607" not in codes and "PM600" in codes
        return
    assert "PM607" in codes and "PM600" not in codes
    (refusal,) = [f for f in result.findings if f.code == "PM607"]
    assert reason in refusal.message and "faithful" in refusal.message
    assert [result.cell_of[codes.index("PM607")]] == [1]
    faithful = migrate_notebook(data)
    assert result.source == faithful.source


def test_a_timeit_cell_the_global_pass_would_edit_falls_back():
    """`_mesh` would go into the first cell with code; a %%timeit cell's definitions do not
    outlive it, so the notebook stays faithful, with PM607 on that cell."""
    data = notebook(code("%%timeit", "import jax", "import numpy as np", "n = 1"),
                    code(*STEP_AND_CALLER.splitlines()), code("out = run()"))
    result = migrate_notebook(data, GLOBAL)
    found = [(cell, f.code) for f, cell in zip(result.findings, result.cell_of)]
    assert (0, "PM607") in found and "PM600" not in [code for _, code in found]
    assert "%%timeit" in result.findings[[c for c, _ in found].index(0)].message


def test_a_cells_own_function_of_a_helpers_name_is_not_taken_for_the_helper():
    """dm-haiku's `_device_put_sharded` in an earlier cell: a later cell's
    jax.device_put_sharded gets the tool's helper under a free name, not the user's function."""
    data = notebook(
        code("import jax", "", "def _device_put_sharded(tree, devices):",
             "    return jax.device_put_sharded(tree, devices)"),
        code("y = jax.device_put_sharded([1.0], jax.local_devices()[:1])"),
        code("z = _device_put_sharded([1.0], jax.local_devices()[:1])"),
    )
    texts = sources(migrate_notebook(data).source)
    assert "def _device_put_sharded_2(shards, devices):" in texts[0]
    assert "    return _device_put_sharded_2(tree, devices)" in texts[0]
    assert texts[1] == "y = _device_put_sharded_2([1.0], jax.local_devices()[:1])"
    assert texts[2] == "z = _device_put_sharded([1.0], jax.local_devices()[:1])"
    again = migrate_notebook(migrate_notebook(data).source)
    assert sources(again.source) == texts


def test_cell_numbers_are_1_based_everywhere_a_user_reads_them(tmp_path):
    """The third cell (after a markdown cell and an import cell) is `cell 3`, as Jupyter
    shows it and README writes it: in text findings, in the messages that name another line,
    in the JSON report's `cell`, and in the diff's hunk headers; a broken cell is named so too."""
    from test_cli import cli

    path = tmp_path / "nb.ipynb"
    path.write_bytes(notebook(
        ("markdown", ["# Title\n"]),
        code("import jax", "import numpy as np", "from data import load"),
        code("step = jax.pmap(lambda x: x * 2)", "out = step(load())"),
    ))
    scan = cli("scan", path, "--style", "global", cwd=tmp_path).stdout.decode()
    assert "nb.ipynb:cell 3:1:8: PM612 info kept pmap's calling convention: argument 0 of " \
           "`step` (`load()`) has no known layout (PM604, cell 3, line 2)" in scan, scan
    assert "cell 2" not in scan and "cell 0" not in scan
    report = json.loads(cli("scan", path, "--format", "json", cwd=tmp_path).stdout)
    assert {f["cell"] for f in report["findings"]} == {3}
    headers = re.findall(rb"^@@ .* @@ (.*)$", cli("diff", path, cwd=tmp_path).stdout, re.M)
    assert headers and set(headers) == {b"cell 3"}
    broken = json.loads(path.read_text())
    broken["cells"][1]["source"] = 7
    path.write_text(json.dumps(broken))
    assert b"not a notebook: cell 2: not a cell with a text source" in cli(
        "scan", path, cwd=tmp_path).stdout
