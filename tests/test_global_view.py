"""`--style global`: fixture pairs under tests/fixtures_global (before.py -> after.py, findings),
run on 8 fake devices and compared through the layout map; the layout-aware comparison itself;
the CLI and configuration switch.

Regenerate the fixtures with `python tests/regen_fixtures.py` and read the diff.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, original_python
from equivalence.check import compare_runs
from equivalence.compare import compare_outputs
from equivalence.layouts import to_migrated_layout
from equivalence.runner import run_entry
from regen_fixtures import GLOBAL_FIXTURES, findings_text
from transforms.global_view.layout import MERGED, REPLICATED, OutputLayout, layout_for
from transforms.pipeline import migrate_source
from transforms.target import TargetJax

CASES = sorted(p for p in GLOBAL_FIXTURES.iterdir() if (p / "before.py").exists())
RUNNABLE = [c for c in CASES if b"\ndef run(" in (c / "before.py").read_bytes()]


def _migrate(path: Path):
    return migrate_source(path.read_bytes(), style="global")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_matches_reviewed_fixture(case):
    result = _migrate(case / "before.py")
    assert result.source == (case / "after.py").read_bytes()
    assert findings_text(result.findings) == (case / "findings.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_second_run_changes_nothing(case):
    after = (case / "after.py").read_bytes()
    assert migrate_source(after, style="global").source == after


def test_every_fallback_code_has_a_fixture():
    codes = {line.split()[1] for case in CASES
             for line in (case / "findings.txt").read_text().splitlines()}
    assert {f"PM60{i}" for i in range(9)} <= codes


def test_global_cases_leave_no_faithful_helper():
    for case in CASES:
        text = (case / "after.py").read_text()
        if case.name.startswith(("producer", "consumer", "per_device", "inline")):
            assert "_pmap_style_shard_map" not in text and "jax.pmap(" not in text.split('"""', 2)[-1]
            assert "_first_replica" not in text, case.name


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_migrated_fixture_computes_the_same(case, tmp_path):
    """The original (legacy JAX where it needs it) and the global migration, on 8 devices,
    compared through the layout map the migration records."""
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    shutil.copy(case / "before.py", tmp_path / "orig" / "case.py")
    shutil.copy(case / "after.py", tmp_path / "new" / "case.py")
    layouts = {f.function: f.outputs for f in _migrate(case / "before.py").layouts}
    python = original_python((case / "before.py").read_bytes())
    original = run_entry(tmp_path / "orig", "case:run", devices=8, python=python)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    report = compare_runs("case:run", 8, original, migrated, same_jax=python == sys.executable,
                          layouts=layouts.get("run", ()))
    assert report.verdict == "equivalent", report.differences


def test_a_wrong_replicated_spec_is_caught(tmp_path):
    """The trap the rules avoid: out_specs=P() on a per-device result silently returns one
    device's value. The check must see it."""
    case = GLOBAL_FIXTURES / "per_device_results"
    wrong = (case / "after.py").read_text()
    wrong = wrong.replace(
        "return jax.tree.map(lambda y: jnp.expand_dims(y, 0), (jnp.tanh(x @ w), "
        "jax.lax.psum(jnp.sum(x), \"i\")))",
        "return jnp.tanh(x @ w), jax.lax.psum(jnp.sum(x), \"i\")",
    ).replace("out_specs=P(\"i\")", "out_specs=P()", 1)
    assert "out_specs=P()" in wrong and "expand_dims" not in wrong
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    shutil.copy(case / "before.py", tmp_path / "orig" / "case.py")
    (tmp_path / "new" / "case.py").write_text(wrong)
    original = run_entry(tmp_path / "orig", "case:run", devices=8)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    report = compare_runs("case:run", 8, original, migrated, same_jax=True, layouts=())
    assert report.verdict == "different"


def _saved(arrays: dict) -> dict:
    leaves = [{"path": path, "key": f"leaf{i}", "dtype": str(a.dtype), "shape": list(a.shape)}
              for i, (path, a) in enumerate(arrays.items())]
    return {"treedef": "t", "leaves": leaves,
            "arrays": {f"leaf{i}": a for i, a in enumerate(arrays.values())}}


def test_layout_map_drops_replicated_rows_and_merges_batches():
    stack = np.stack([np.arange(3.0)] * 4)
    batch = np.arange(24.0).reshape(4, 2, 3)
    steps = np.stack([np.full(4, 0.5), np.full(4, 0.25)])  # (steps, devices)
    output = _saved({"['w']": stack, "['x']": batch, "['losses']": steps, "['n']": np.array(3)})
    layouts = (OutputLayout("['w']", REPLICATED), OutputLayout("['x']", MERGED),
               OutputLayout("['losses']", REPLICATED, axis=1))
    converted, problems, done = to_migrated_layout(output, layouts)
    assert problems == [] and len(done) == 3
    arrays = converted["arrays"]
    assert arrays["leaf0"].tolist() == [0.0, 1.0, 2.0]
    assert arrays["leaf1"].shape == (8, 3)
    assert arrays["leaf2"].tolist() == [0.5, 0.25]
    assert arrays["leaf3"].shape == ()
    migrated = _saved({"['w']": np.arange(3.0), "['x']": batch.reshape(8, 3),
                       "['losses']": np.array([0.5, 0.25]), "['n']": np.array(3)})
    assert compare_outputs(converted, migrated) == []


def test_a_replicated_stack_whose_rows_differ_is_a_difference():
    rows = np.stack([np.arange(3.0), np.arange(3.0) + 1.0])
    _, problems, _ = to_migrated_layout(_saved({"['w']": rows}), (OutputLayout("['w']", REPLICATED),))
    assert [str(p) for p in problems] == ["['w']: the replicated stack's rows [1] differ from row 0"]


def test_longest_prefix_wins():
    outputs = (OutputLayout("", REPLICATED), OutputLayout("['x']", MERGED))
    assert layout_for("['x']", outputs).kind == MERGED
    assert layout_for("['w']['b']", outputs).kind == REPLICATED


def test_old_target_keeps_the_faithful_style():
    source = (GLOBAL_FIXTURES / "producer_stack" / "before.py").read_bytes()
    result = migrate_source(source, TargetJax.parse("0.6.2"), style="global")
    assert "PM607" in {f.code for f in result.findings}
    assert result.source == migrate_source(source, TargetJax.parse("0.6.2")).source


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "migrator.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_cli_style_flag_and_config(tmp_path):
    program = tmp_path / "prog.py"
    shutil.copy(GLOBAL_FIXTURES / "producer_stack" / "before.py", program)
    faithful = _cli("diff", str(program), cwd=tmp_path)
    global_ = _cli("diff", "--style", "global", str(program), cwd=tmp_path)
    assert faithful.returncode == global_.returncode == 1
    assert "_pmap_style_shard_map" in faithful.stdout
    assert "jax.set_mesh(mesh)" in global_.stdout and "_pmap_style_shard_map" not in global_.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nstyle = "global"\n')
    configured = _cli("scan", "--format", "json", str(program), cwd=tmp_path)
    assert "PM600" in {f["code"] for f in json.loads(configured.stdout)["findings"]}
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nstyle = "globl"\n')
    bad = _cli("scan", str(program), cwd=tmp_path)
    assert bad.returncode == 2 and "style" in bad.stderr


# -- caller dataflow: merged results, generators, factories, per-device scalars ------------

def _global(source: str):
    return migrate_source(source.encode(), style="global")


_DOUBLE = '''import jax
import jax.numpy as jnp
import numpy as np


@jax.pmap
def double(x):
    return x * 2.0


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    h = double(x)
    return {"h": CONSUMER}
'''


def test_a_result_with_a_leading_axis_comes_back_merged():
    result = _global(_DOUBLE.replace("CONSUMER", "np.asarray(h)"))
    text = result.source.decode()
    assert 'out_specs=P("devices")' in text and "expand_dims" not in text
    assert [o.kind for f in result.layouts for o in f.outputs] == [MERGED]


def test_a_consumer_of_the_device_axis_keeps_the_stacked_layout():
    """`h[0, 1]` reads device 0's row of pmap's stack: with merged results it would read
    another element, so the caller is analysed again with the stacked layout."""
    result = _global(_DOUBLE.replace("CONSUMER", "np.asarray(h[0, 1])"))
    text = result.source.decode()
    assert "expand_dims" in text and "h[0, 1]" in text
    assert "PM600" in {f.code for f in result.findings}


def test_least_ranks_of_results():
    from transforms.global_view.ranks import least_result_ranks
    from transforms.global_view.sites import find_sites
    from transforms.reading.names import ImportTable

    source = '''import jax
import jax.numpy as jnp


@jax.pmap
def f(x, w):
    h = jnp.tanh(x @ w)
    return h, jnp.sum(h), jax.lax.all_gather(jnp.mean(x), "i"), jnp.zeros(x.shape)
'''
    tree = ast.parse(source)
    sites, _ = find_sites(tree, ImportTable.from_tree(tree).imported)
    imported = ImportTable.from_tree(tree).imported
    assert least_result_ranks(sites[0], {"x": 2}, imported) == [1, 0, 1, 2]
    assert least_result_ranks(sites[0], {}, imported) == [0, 0, 1, 0]


def test_a_tuple_result_indexed_by_position_is_not_device_zero():
    case = GLOBAL_FIXTURES / "consumer_tuple_and_list_trees"
    text = (case / "after.py").read_text()
    assert "jax.device_get(out[0])" in text and 'params[0]["b"]' in text
    assert "np.stack" not in text.split("def run", 1)[1]


def test_a_generator_is_followed_only_when_its_caller_is_its_only_user():
    source = (GLOBAL_FIXTURES / "producer_generator" / "before.py").read_text()
    assert "reshape(n * PER_DEVICE, -1)" in _global(source).source.decode()
    twice = source.replace("    data = batches(x, y, n)\n",
                           "    data = batches(x, y, n)\n    again = batches(x, y, n)\n")
    result = _global(twice)
    assert "reshape(n, PER_DEVICE, -1)" in result.source.decode()
    assert any(f.code == "PM605" and "`batches`" in f.message for f in result.findings)


def test_a_factory_used_as_a_value_stays_faithful():
    source = (GLOBAL_FIXTURES / "inline_factory" / "before.py").read_text()
    assert "PM601" not in {f.code for f in _global(source).findings}
    kept = source.replace('"shifted": ring_shift(n)(x)', '"shifted": shift(x)').replace(
        "    out = {", "    shift = ring_shift(n)\n    out = {")
    assert "PM601" in {f.code for f in _global(kept).findings}


def test_per_device_scalars_need_an_elementwise_body():
    from transforms.global_view.ranks import leading_axis_transparent
    from transforms.global_view.sites import find_sites
    from transforms.reading.names import ImportTable

    def transparent(body: str) -> bool:
        tree = ast.parse(f"import jax\nimport jax.numpy as jnp\n\n@jax.pmap\ndef f(x):\n{body}\n")
        imported = ImportTable.from_tree(tree).imported
        return leading_axis_transparent(find_sites(tree, imported)[0][0], imported)

    assert transparent("    t = jax.lax.psum(x, 'i')\n    return x / t, jnp.maximum(x, 0.0)")
    assert not transparent("    return x * jnp.ones(3)")  # builds an array from the number
    assert not transparent("    return jnp.sum(x)")  # a reduction drops the (1,) axis
    assert not transparent("    return x, 1.0")  # a constant result stays a scalar


def test_a_function_called_in_the_module_gives_back_pmap_layouts():
    """`forward()` returns a step's per-device result to `run()`: merged it would change what
    `run` receives, so `forward` keeps pmap's stacked layout and both stay correct."""
    source = _DOUBLE.replace("def run():", "def forward():").replace(
        '    return {"h": CONSUMER}\n', "    return h\n\n\ndef run():\n    return {\"h\": np.asarray(forward())}\n")
    result = _global(source)
    assert "expand_dims" in result.source.decode() and result.layouts == ()
    assert "PM600" in {f.code for f in result.findings}
