"""`--style global`: fixture pairs under tests/fixtures_global (before.py -> after.py, findings),
run on 8 fake devices and compared through the layout map; the layout-aware comparison itself;
the CLI and configuration switch.

Regenerate the fixtures with `python tests/regen_fixtures.py` and read the diff. The after.py
files import
import the faithful helpers from `_pmap_helpers` (tests/fixtures/_pmap_helpers.py); the
runs on 8 devices (marked `equivalence`, two JAX processes each) run the module's own migration.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, imports_flax, link_flax_or_skip, original_python
from equivalence.check import compare_runs
from equivalence.compare import compare_outputs
from equivalence.layouts import to_migrated_layout
from equivalence.runner import run_entry
from regen_fixtures import GLOBAL_FIXTURES, findings_text, migrate_fixture
from transforms.codes.rules import all_rules
from transforms.contract_names import is_fully_global
from transforms.global_view.layout import MERGED, REPLICATED, OutputLayout, layout_for
from transforms.global_view.step_text import LINE_LIMIT
from transforms.pipeline import migrate_source
from site_findings_view import migrated_with_named_blockers
from transforms.target import TargetJax

CASES = sorted(p for p in GLOBAL_FIXTURES.iterdir() if (p / "before.py").exists())
RUNNABLE = [c for c in CASES if b"\ndef run(" in (c / "before.py").read_bytes()]


def _migrate(path: Path):
    return migrate_source(path.read_bytes(), style="global")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_matches_reviewed_fixture(case):
    result = migrate_fixture((case / "before.py").read_bytes(), "global")
    assert result.source == (case / "after.py").read_bytes()
    assert findings_text(result.findings) == (case / "findings.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_second_run_changes_nothing(case):
    after = (case / "after.py").read_bytes()
    assert migrate_fixture(after, "global").source == after


def test_every_global_style_code_has_a_fixture():
    """Every PM6xx code of the rules reference (PM610: fallback_donated_copy_read) is shown by
    at least one fixture, as a finding's code or as the blocker a PM612 names (`(PM603, line
    9)`); a new code needs one."""
    lines = [line for case in CASES for line in (case / "findings.txt").read_text().splitlines()]
    codes = {line.split()[1] for line in lines}
    codes |= {named for line in lines if line.split()[1] == "PM612"
              for named in re.findall(r"\((PM6\d\d)\b", line)}
    global_codes = {code for code in all_rules() if code.startswith("PM6")}
    assert "PM610" in global_codes
    assert global_codes <= codes, sorted(global_codes - codes)


def test_global_cases_leave_no_faithful_helper():
    for case in CASES:
        if case.name.startswith(("producer", "consumer", "per_device", "inline", "static_argnums",
                                 "stacked_decorators", "out_axes_tree", "class_constant_axis",
                                 "placement_options", "in_axes_tree", "nonzero_axes", "hoist",
                                 "axes_", "multiprocess_axes", "class_held", "nested_pmap")):
            text = (case / "after.py").read_text()
            assert "_pmap_style_shard_map" not in text and "jax.pmap(" not in text.split('"""', 2)[-1]
            assert "_first_replica" not in text, case.name


@pytest.mark.equivalence
@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_migrated_fixture_computes_the_same(case, tmp_path):
    """The original (legacy JAX where it needs it) and the global migration, on 8 devices,
    compared through the layout map the migration records."""
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    shutil.copy(case / "before.py", tmp_path / "orig" / "case.py")
    migration = _migrate(case / "before.py")  # the module's own, helpers included
    (tmp_path / "new" / "case.py").write_bytes(migration.source)
    if imports_flax((case / "before.py").read_bytes()):
        link_flax_or_skip(tmp_path / "orig", tmp_path / "new")
    layouts = {f.function: f.outputs for f in migration.layouts}
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
        "return jax.tree.map(\n        lambda y: jnp.expand_dims(y, 0), (jnp.tanh(x @ w), "
        "jax.lax.psum(jnp.sum(x), \"i\"))\n    )",
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
    assert 'mesh=_mesh("batch")' in global_.stdout and "_pmap_style_shard_map" not in global_.stdout
    assert "set_mesh" not in global_.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nstyle = "global"\n')
    configured = _cli("scan", "--format", "json", str(program), cwd=tmp_path)
    assert "PM600" in {f["code"] for f in json.loads(configured.stdout)["findings"]}
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nstyle = "globl"\n')
    bad = _cli("scan", str(program), cwd=tmp_path)
    assert bad.returncode == 2 and "style" in bad.stderr


# -- pmap options and site shapes ---------------------------------------------------------

def _global(source: str):
    result = migrated_with_named_blockers(migrate_source(source.encode(), style="global"))
    return result.source.decode(), {f.code for f in result.findings}, result.findings


_STATIC = """import functools

import jax
import numpy as np


@functools.partial(jax.pmap, axis_name="i", static_broadcasted_argnums=1)
def f(x, k):
    return jax.lax.psum(x * k, "i")
{extra}

def run():
    n = jax.local_device_count()
    return np.asarray(f(np.ones((n, 2), np.float32), 3))
"""


def test_static_argnums_keep_pmap_numbering_and_only_mapped_args_reach_shard_map():
    text, codes, _ = _global(_STATIC.format(extra=""))
    assert "PM600" in codes and "jax.pmap" not in text
    assert "def _f(x, k):" in text  # the name `f` is also in `def`: the rename must not hit it
    assert "@functools.partial(jax.jit, static_argnums=1)\ndef f(x, k):" in text
    assert 'lambda x: _f(x, k), mesh=_mesh("i"), in_specs=(P(),)' in text and ")(x)" in text
    compile(text, "after.py", "exec")


def test_the_body_keeps_its_def_under_a_name_the_module_does_not_use():
    text, codes, _ = _global(_STATIC.format(extra="\n\n_f = None\n"))
    assert "PM600" in codes and "def _f_2(x, k):" in text and "_f = None" in text
    assert "lambda x: _f_2(x, k)" in text


def test_static_argument_holding_a_per_device_value_falls_back():
    source = _STATIC.replace("np.ones((n, 2), np.float32), 3", "np.ones((n, 2)), np.ones((n, 2))")
    _, codes, findings = _global(source)
    assert "PM600" not in codes
    assert any(f.code == "PM604" and "static argument 1" in f.message for f in findings)


_PARTIAL = """import functools

import jax
import numpy as np

SCALE = 2.0


def step(x, scale, offset=0.0):
    return jax.lax.psum(x * scale + offset, "i")


def shifted(bias, x, scale):
    return jax.lax.psum(x * scale, "i") + bias


def shifted_more(x, scale, y):
    return jax.lax.psum(x * scale, "i") + y


def run():
    n = jax.local_device_count()
    cfg = {{"scale": 3.0}}
    f = jax.pmap(functools.partial({partial}), axis_name="i"{options})
    return np.asarray(f(np.ones((n, 2), np.float32))[0])
"""


@pytest.mark.parametrize("partial, code, message", [
    ("step, scale=SCALE", "PM600", None),  # `offset` after it keeps its default
    ("step, scale=SCALE, offset=1.0", "PM600", None),
    ("shifted, 1.0, scale=SCALE", "PM600", None),  # a leading parameter bound by position
    # `scale` is filled by position, and this call leaves it out (a TypeError in pmap too)
    ("step, offset=1.0", "PM603", "called with 1 of its 2 parameters"),
    ("step, scale=cfg['scale']", "PM600", None),  # evaluated once, where the partial is built
    ("step, scale=(k := 2.0)", "PM602", "binds a name or yields where the partial is built"),
    ("step, scale=SCALE, bogus=1", "PM602", "not a parameter of the mapped function"),
    ("step, 1.0, 2.0, 3.0, 4.0", "PM602", "more positional arguments"),
    # `y` after the bound `scale` has no default: only a keyword could pass it
    ("shifted_more, scale=SCALE", "PM602", "before `y`, which has no default"),
])
def test_partial_binding_reads_which_parameters_calls_fill(partial, code, message):
    """pmap over `functools.partial(f, ...)`: calls fill by position the parameters before the
    first bound keyword (after any bound by position); anything else keeps the site on pmap's
    contract, with the reason."""
    _, codes, findings = _global(_PARTIAL.format(partial=partial, options=""))
    if message is None:
        assert "PM600" in codes, findings
    else:
        assert "PM600" not in codes
        assert any(f.code == code and message in f.message for f in findings), findings


def test_a_partial_attribute_keyword_is_read_where_pmap_read_it():
    """`scale=cfg.scale` is read when the site is built: the site stays an assignment there,
    it is not hoisted, and with static arguments (a jitted def, which reads its names at each
    trace) the value is bound to a name there."""
    source = _PARTIAL.format(partial="step, scale=Cfg.scale", options="").replace(
        "SCALE = 2.0", "class Cfg:\n    scale = 2.0")
    text, codes, _ = _global(source)
    assert "PM600" in codes
    assert "functools.partial(step, scale=Cfg.scale)" in text and "def f(" not in text
    constant, _, _ = _global(_PARTIAL.format(partial="step, scale=SCALE", options=""))
    assert "def f(x):" in constant  # a module constant: hoisted to module level
    static = source.replace("def step(x, scale", "def step(x, k, scale").replace(
        'axis_name="i"', 'axis_name="i", static_broadcasted_argnums=(1,)').replace(
        "np.float32))", "np.float32), 3)")
    text, codes, findings = _global(static)
    assert "PM600" in codes
    assert "    scale = Cfg.scale\n\n    @functools.partial(jax.jit, static_argnums=1)\n" in text
    assert "lambda x: step(x, k, scale=scale)" in text


_LATE_READ = """import functools

import jax
import numpy as np


def step(x, k, scale):
    return jax.lax.psum(x * scale, "i") + k


def run():
    n = jax.local_device_count()
    scale = 2.0
    f = jax.pmap(functools.partial(step, scale=scale), axis_name="i",
                 static_broadcasted_argnums=(1,))
    {after} = 5.0
    return np.asarray(f(np.arange(n * 2, dtype=np.float32).reshape(n, 2), 3))
"""


@pytest.mark.parametrize("after, goes_global", [("other", True), ("scale", False)])
def test_a_partial_name_bound_again_keeps_a_static_site_on_the_contract(after, goes_global):
    """With static arguments the site becomes a jitted def that reads `scale` at its first
    trace; pmap's partial read it when built. Rebinding it in between would change the step."""
    text, codes, findings = _global(_LATE_READ.format(after=after))
    assert ("PM600" in codes) == goes_global
    if not goes_global:
        assert any(f.code == "PM602" and "`scale`" in f.message and "bound again" in f.message
                   for f in findings)
        assert "functools.partial(step, scale=scale)" in text


_KEYWORD_CALLS = (ROOT / "tests" / "fixtures_global" / "partial_keyword_calls" / "before.py"
                  ).read_text()


@pytest.mark.parametrize("old, new, code, message", [
    # another call without the keyword: the calls do not agree on what they pass by keyword
    ("        errors.append(np.asarray(p_eval_step(state.params, batch)[0]))\n",
     "        errors.append(np.asarray(p_eval_step(state.params, batch)[0]))\n"
     "        p_train_step(state, batch)\n", "PM603", "called with keywords"),
    ("p_train_step(state, batch, dropout_rng", "p_train_step(state, batch=batch, dropout_rng",
     "PM602", "calls pass `batch` by keyword"),
    ("    dropout_rngs = jax.random.split", "    scale = 3.0\n    dropout_rngs = jax.random.split",
     "PM602", "`scale`, which `p_train_step`'s functools.partial reads when it is built"),
    ("dropout_rng=dropout_rngs)", "dropout_rng=state)", "PM610",
     "`state` is `state` or part of it, which `p_train_step` donates in the same call"),
])
def test_keyword_calls_of_a_partial_site_fall_back_where_unproven(old, new, code, message):
    """The keyword-call form needs every call to pass the same keywords, each a parameter after
    the partial's bound ones, and the partial's arguments read the same at each trace; a
    keyword argument that shares the donated argument's buffers is refused as a positional
    one is."""
    assert old in _KEYWORD_CALLS
    source = _KEYWORD_CALLS.replace(old, new).replace("    scale = 2.0\n", "    scale = 2.0\n"
                                                     "    cfg = types.SimpleNamespace(s=2.0)\n")
    source = source.replace("import functools\n", "import functools\nimport types\n")
    _, codes, findings = _global(source)
    assert "PM600" not in {f.code for f in findings if f.line == 49}, findings
    assert any(f.code == code and message in f.message for f in findings), findings


_CLASS_AXIS = """import jax
import numpy as np


class Cfg:
    axis = "r"
{extra}

def total(x):
    return jax.lax.psum(x, Cfg.axis)


def run():
    n = jax.local_device_count()
    return np.asarray(jax.pmap(total, axis_name=Cfg.axis)(np.arange(n * 2.0).reshape(n, 2))[0])
"""


@pytest.mark.parametrize("extra, goes_global", [
    ("", True),
    ("\n\nCfg.axis = \"other\"\n", False),  # rebound from outside the class
    ("    axis = \"again\"\n", False),  # assigned twice in the body
    ("\n\nAlias = Cfg\nAlias.axis = \"other\"\n", False),  # rebound through an alias
])
def test_class_constant_axis_names_only_when_never_rebound(extra, goes_global):
    text, codes, _ = _global(_CLASS_AXIS.format(extra=extra))
    assert ("PM600" in codes) == goes_global
    assert ('_mesh("r")' in text) == goes_global


def test_out_axes_none_result_must_be_proven_replicated():
    """(0, None): the None result is P() only when reduced; a local mean is not."""
    proven = (GLOBAL_FIXTURES / "out_axes_tree" / "after.py").read_text()
    assert 'out_specs=(P("i"), P())' in proven
    findings = (GLOBAL_FIXTURES / "fallback_out_axes_unproven" / "findings.txt").read_text()
    assert "PM606 result 1" in findings and "PM600" not in findings


def test_only_a_bare_jit_may_be_stacked_with_pmap():
    source = """import functools

import jax
import numpy as np


@jax.jit
@functools.partial(jax.pmap, axis_name="i", donate_argnums=0)
def step(x):
    return jax.lax.psum(x, "i")


def run():
    n = jax.local_device_count()
    return np.asarray(step(np.arange(n * 2.0).reshape(n, 2)))
"""
    _, codes, findings = _global(source)
    assert "PM600" not in codes
    assert any(f.code == "PM602" and "jax.jit above a pmap with donate" in f.message
               for f in findings)


@pytest.mark.parametrize("option, goes_global", [
    ("devices=jax.local_devices()", True),
    ("devices=jax.devices()", True),
    ("devices=list(jax.devices())", True),
    ("devices=tuple(jax.local_devices())", True),
    ("devices=list(jax.local_devices()[:1])", False),
    ("axis_size=n", True),
    ("axis_size=4", False),
    ("devices=jax.local_devices()[:1]", False),
    ('backend="cpu"', False),
])
def test_placement_options_are_dropped_only_when_they_are_the_whole_mesh(option, goes_global):
    source = f"""import jax
import numpy as np


def run():
    n = jax.local_device_count()
    x = np.arange(n * 2.0).reshape(n, 2)
    return np.asarray(jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", {option})(x)[0])
"""
    text, codes, _ = _global(source)
    assert ("PM600" in codes) == goes_global
    assert ("devices=" in text or "axis_size" in text or "backend" in text) != goes_global


@pytest.mark.parametrize("devices, goes_global", [
    ("jax.devices()", True), ("list(jax.devices())", True), ("tuple(jax.local_devices())", True),
    ("list(jax.devices())[:2]", False), ("sorted(jax.devices())", False),
])
def test_device_put_replicated_onto_every_device_is_replicated(devices, goes_global):
    source = f"""import jax
import jax.numpy as jnp


@jax.pmap
def double(w):
    return w * 2


def run():
    w = jax.device_put_replicated(jnp.arange(3.0), {devices})
    return double(w)[0]
"""
    text, codes, _ = _global(source)
    assert ("PM600" in codes) == goes_global
    assert ("device_put_replicated" in text) != goes_global


def test_in_axes_one_squeezes_in_the_body_and_checks_the_axis_size():
    text = (GLOBAL_FIXTURES / "nonzero_axes" / "after.py").read_text()
    assert "x = jax.tree.map(lambda y: jnp.squeeze(y, 1), x)" in text
    assert 'in_specs=(P(None, "i"),),\n        out_specs=P(None, "i")' in text
    findings = (GLOBAL_FIXTURES / "fallback_axis_size_unknown" / "findings.txt").read_text()
    assert "not provably the device count" in findings


def test_each_axis_name_gets_its_own_mesh_of_the_same_devices():
    """Each axis's steps run on the module's mesh of that axis, all built by the same call;
    no caller statement is wrapped or moved."""
    text = (GLOBAL_FIXTURES / "axes_separate_statements" / "after.py").read_text()
    assert "return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))" \
        in text
    assert 'mesh=_mesh("i")' in text and 'mesh=_mesh("j")' in text
    assert "with " not in text and "set_mesh" not in text and "_pmap_style_shard_map" not in text


def test_a_statement_calling_two_axes_is_left_as_it_is():
    """Sites of two axes in one dict literal: each step names its own mesh, so the statement
    (and the order its calls run in) is the original's."""
    before = (GLOBAL_FIXTURES / "axes_one_statement" / "before.py").read_text()
    text = (GLOBAL_FIXTURES / "axes_one_statement" / "after.py").read_text()
    run = text[text.index("def run():"):]
    assert '        "top": largest(x),\n        "top_again": largest(x * 2),\n' in run
    assert run.count("\n") == before[before.index("def run():"):].count("\n")


def test_mesh_names_never_shadow_the_modules_names():
    source = (GLOBAL_FIXTURES / "producer_stack" / "before.py").read_text()
    source = source.replace("def run():", "_mesh = 3\nmesh_2 = 4\n\n\ndef run():")
    text = _global_result(source).source.decode()
    assert "def _mesh_2(axis_name):" in text and 'mesh=_mesh_2("batch")' in text
    assert 'mesh = _mesh_2("batch")' in text and "_mesh = 3" in text


def test_every_axis_fallback_names_its_line():
    findings = (GLOBAL_FIXTURES / "fallback_axes" / "findings.txt").read_text()
    for reason in ("in the header of this statement", "the helper `log_count`",
                   "one site's call is an argument of another's",
                   "has no axis_name and is called under the meshes of axes"):
        assert reason in findings, reason
    # No statement is moved or indented any more, so these no longer stand in the way.
    for gone in ("shares its line with other code", "whose order relative to those calls",
                 "multi-line string"):
        assert gone not in findings, gone
    after = (GLOBAL_FIXTURES / "fallback_axes" / "after.py").read_text()
    assert "_pmap_style_shard_map" not in after and "_per_device_shard_map(" in after  # PM612


# -- caller dataflow: merged results, generators, factories, per-device scalars ------------

def _global_result(source: str):
    return migrated_with_named_blockers(migrate_source(source.encode(), style="global"))


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
    result = _global_result(_DOUBLE.replace("CONSUMER", "np.asarray(h)"))
    text = result.source.decode()
    assert 'out_specs=P("devices")' in text and "expand_dims" not in text
    assert [o.kind for f in result.layouts for o in f.outputs] == [MERGED]


def test_a_consumer_of_the_device_axis_keeps_the_stacked_layout():
    """`h[0, 1]` reads device 0's row of pmap's stack: with merged results it would read
    another element, so the caller is analysed again with the stacked layout."""
    result = _global_result(_DOUBLE.replace("CONSUMER", "np.asarray(h[0, 1])"))
    text = result.source.decode()
    assert "expand_dims" in text and "h[0, 1]" in text
    assert "PM600" in {f.code for f in result.findings}


def test_least_ranks_of_results():
    from transforms.global_view.ranks import least_result_ranks
    from transforms.global_view.site_discovery import find_sites
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


_MAPPED = (GLOBAL_FIXTURES / "producer_mapped_iterators" / "before.py").read_text()


@pytest.mark.parametrize("old, new, message", [
    # `**` hides which parameters a call fills
    ("create_input_iter(0, batch_size=4 * n)", "create_input_iter(0, **{'batch_size': 4 * n})",
     "which the global style cannot follow"),
    # a required parameter left out: the original raises, nothing to follow
    ("create_input_iter(0, batch_size=4 * n)", "create_input_iter(0)",
     "which the global style cannot follow"),
])
def test_helpers_called_with_keywords_are_followed_where_one_rewrite_serves_every_call(
        old, new, message):
    """`create_input_iter(seed, *, batch_size, train=True)` called with keywords is followed
    (fixture producer_mapped_iterators); what it cannot follow keeps the steps on pmap's
    contract, naming the helper."""
    assert old in _MAPPED
    _, codes, findings = _global(_MAPPED.replace(old, new, 1))
    assert "PM600" not in {f.code for f in findings if f.line in (34, 41)}, findings
    assert any(message in f.message and "create_input_iter" in f.message for f in findings), \
        findings


def test_a_helper_rewritten_for_one_call_is_refused_where_another_passes_plain_values():
    """`split_rows(x, n)` merges the helper's reshape; `split_rows(x, 2)` in the same function
    runs that rewritten helper too. Found while testing keyword calls of helpers: it was a
    wrong rewrite (check: different); now the caller keeps pmap's contract, naming the call."""
    source = """import jax
import numpy as np


def split_rows(x, *, count):
    return x.reshape((count, -1) + x.shape[1:])


def total(x):
    return jax.lax.psum(x, "i")


p_total = jax.pmap(total, axis_name="i")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 4.0)
    pairs = split_rows(x, count=2)
    return {"t": np.asarray(p_total(split_rows(x, count=n))), "pairs": pairs}
"""
    _, codes, findings = _global(source)
    assert "PM600" not in codes
    assert any(f.line == 19 and "`split_rows` is rewritten for the per-device values another "
               "call passes" in f.message for f in findings), findings
    # every call splitting by the device count: one rewrite serves them all
    _, codes, _ = _global(source.replace("count=2", "count=n"))
    assert "PM600" in codes


_STEP_PASSED = (GLOBAL_FIXTURES / "step_passed_to_helper" / "before.py").read_text()


@pytest.mark.parametrize("old, new, message", [
    # a donating step: the donation analysis does not follow it into the helper
    ('p_eval_step = jax.pmap(eval_step, axis_name="batch")',
     'p_eval_step = jax.pmap(eval_step, axis_name="batch", donate_argnums=(1,))',
     "follows only for a step that donates nothing"),
    # the helper keeps the step: it is a value there, not a call
    ("    metrics = []\n", "    kept = [p_eval_step]\n    metrics = []\n", "used as a value"),
])
def test_a_step_passed_to_a_helper_is_followed_only_where_its_uses_there_are_calls(
        old, new, message):
    assert old in _STEP_PASSED
    _, codes, findings = _global(_STEP_PASSED.replace(old, new, 1))
    assert not any(f.code == "PM600" and "p_eval_step" in f.message for f in findings), findings
    assert any(message in f.message for f in findings), findings


_SHAPE_LED = (GLOBAL_FIXTURES / "producer_shape_led_by_devices" / "before.py").read_text()


@pytest.mark.parametrize("old, new, message", [
    # a sum over n identical copies is n times the value: not the migrated scalar's sum
    ("np.mean(v).item()", "np.sum(v).item()", "passed to `np.sum`"),
    # a shape not led by the device count: no known leading axis, so no stacked layout
    ("[local_device_count, 4]", "[4, local_device_count]", "has no known layout"),
])
def test_shapes_and_reductions_of_stacks_only_where_the_rows_are_known(old, new, message):
    """Fixture producer_shape_led_by_devices goes global; a sum of a replicated stack, or
    batch dims led by something else than the device count, keep pmap's contract."""
    assert old in _SHAPE_LED
    _, codes, findings = _global(_SHAPE_LED.replace(old, new))
    assert "PM600" not in codes, findings
    assert any(message in f.message for f in findings), findings


def test_a_generator_is_followed_only_when_its_caller_is_its_only_user():
    source = (GLOBAL_FIXTURES / "producer_generator" / "before.py").read_text()
    assert "reshape(n * PER_DEVICE, -1)" in _global_result(source).source.decode()
    # Called by the caller twice, with the same layouts: one rewritten generator serves both.
    twice = source.replace("    data = batches(x, y, n)\n",
                           "    data = batches(x, y, n)\n    again = batches(x, y, n)\n")
    assert "reshape(n * PER_DEVICE, -1)" in _global_result(twice).source.decode()
    # Used by another function too: that one would get the rewritten generator.
    elsewhere = source + "\n\ndef other(x, y, n):\n    return batches(x, y, n)\n"
    result = _global_result(elsewhere)
    assert "reshape(n, PER_DEVICE, -1)" in result.source.decode()
    assert any(f.code == "PM605" and "`batches`" in f.message for f in result.findings)


def test_a_factory_used_as_a_value_stays_faithful():
    source = (GLOBAL_FIXTURES / "inline_factory" / "before.py").read_text()
    assert "PM601" not in {f.code for f in _global_result(source).findings}
    stored = source.replace('"shifted": ring_shift(n)(x)', '"shifted": shift(x)').replace(
        "    out = {", "    shift = ring_shift(n)\n    out = {")  # bound once, only called
    assert "PM601" not in {f.code for f in _global_result(stored).findings}
    kept = source.replace('"shifted": ring_shift(n)(x)', '"shifted": shifts[0](x)').replace(
        "    out = {", "    shifts = [ring_shift(n)]\n    out = {")  # kept as a value
    assert "PM601" in {f.code for f in _global_result(kept).findings}


def test_per_device_scalars_need_an_elementwise_body():
    from transforms.global_view.ranks import leading_axis_transparent
    from transforms.global_view.site_discovery import find_sites
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
    result = _global_result(source)
    assert "expand_dims" in result.source.decode() and result.layouts == ()
    assert "PM600" in {f.code for f in result.findings}


# -- multi-process modules (transforms/global_view/multiprocess.py) ---------------------------
MULTIPROCESS_PROGRAM = '''\
import functools

import jax
import jax.numpy as jnp
import numpy as np
{prelude}

@functools.partial(jax.pmap, axis_name="batch")
def step(params, x):
    return jax.lax.pmean(jnp.sum(x * params), "batch")


def run({parameters}):
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    params = jnp.stack([{value}] * n)
    x = rng.normal(size=(n, 2, 3)).astype(np.float32)
{call}
    return np.asarray(loss)
'''
PLAIN_CALL = "    loss = step(params, x)"


def _multiprocess(value="jnp.ones(3)", prelude="", parameters="", call=PLAIN_CALL):
    source = MULTIPROCESS_PROGRAM.format(value=value, prelude=prelude, parameters=parameters,
                                         call=call)
    return migrate_source(source.encode(), style="global")


def test_multiprocess_module_goes_global_with_process_local_batches():
    result = _multiprocess()
    text = result.source.decode()
    assert {"PM600"} <= {f.code for f in result.findings} and "PM607" not in {
        f.code for f in result.findings}
    assert "_pmap_style_shard_map" not in text
    assert "jax.make_mesh((jax.device_count(),)" in text and 'mesh = _mesh("batch")' in text
    # The per-process rows (the RNG is seeded by process_index) stay host-local, merged...
    assert "rng.normal(size=(n * 2, 3))" in text
    # ...and become one global array at the call; the constant stack is placed once with P().
    assert 'jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x)' in text
    assert "params = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))" in text
    assert "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P" in text


@pytest.mark.parametrize("value, prelude, parameters, blamed", [
    ("jnp.ones(3) * jax.process_index()", "", "", "jax.process_index"),
    ("jnp.ones(3) * offset()", "\n\ndef offset():\n    return float(jax.process_index())\n",
     "", "offset"),
    ("jnp.ones(3) * OFFSET", "\nOFFSET = jax.process_index()\n", "", "OFFSET"),
    ("jnp.ones(3) * scale", "", "scale=1.0", "scale"),
    ("jnp.ones(3) * time.time()", "import time\n", "", "time.time"),
    ("jnp.asarray(np.random.normal(size=3))", "", "", "np.random.normal"),
    ("jnp.asarray(rng.normal(size=3))", "", "", "rng"),
], ids=["process_index", "module_function", "module_name", "parameter", "clock",
        "global_rng", "process_seeded_rng"])
def test_a_replicated_value_that_can_differ_between_processes_stays_stacked(
        value, prelude, parameters, blamed):
    """Not placed once with P() (that needs every process to place the same value): it keeps
    pmap's stacked layout, each process's own rows made one global array at the call."""
    result = _multiprocess(value, prelude, parameters)
    text = result.source.decode()
    codes = {f.code for f in result.findings}
    assert "PM600" in codes and "PM607" not in codes
    stacked = [f.message for f in result.findings if f.code == "PM611" and "`params`" in f.message]
    assert stacked and f"`{blamed}` can differ between processes" in stacked[0]
    assert 'multihost_utils.host_local_array_to_global_array(params, mesh, P("batch"))' in text
    assert "device_put" not in text and "_pmap_style_shard_map" not in text
    assert "params = jax.tree.map(lambda y: jnp.squeeze(y, 0), params)" in text


def test_a_step_called_on_process_0_only_stays_faithful():
    call = "    loss = 0.0\n    if jax.process_index() == 0:\n        loss = step(params, x)"
    result = _multiprocess(call=call)
    assert any(f.code == "PM607" and "called only on some processes" in f.message
               for f in result.findings)
    assert "PM600" not in {f.code for f in result.findings}


def test_multiprocess_per_device_results_come_back_host_local():
    text = (GLOBAL_FIXTURES / "multiprocess_per_device_results" / "after.py").read_text()
    assert "multihost_utils.global_array_to_host_local_array(" in text
    assert 'mesh,\n        P("i"),' in text


def test_host_barrier_does_not_keep_its_caller_faithful():
    """Single-process too: the faithful rule writes sync_global_devices, no pmap is left."""
    source = (GLOBAL_FIXTURES / "producer_stack" / "before.py").read_text()
    source = source.replace("def run():", 'def sync():\n    jax.pmap(lambda x: jax.lax.psum('
                            'x, "i"), "i")(jnp.ones(jax.local_device_count())).block_until_ready()'
                            '\n\n\ndef run():\n    sync()', 1)
    result = migrate_source(source.encode(), style="global")
    codes = {f.code for f in result.findings}
    assert {"PM600", "PM503"} <= codes and "PM608" not in codes
    assert b"jax.pmap(" not in result.source and b"_pmap_style_shard_map" not in result.source
    assert b'multihost_utils.sync_global_devices("sync")' in result.source


def test_per_device_results_given_back_with_in_axes_none_stay_faithful():
    """A step's per-device results are each process's own rows: broadcasting them with
    in_axes=None to another step is not one value for every process."""
    source = b'''\
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def rows(x):
    return x * 2.0


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, None))
def use(x, r):
    return jax.lax.psum(jnp.sum(x) + jnp.sum(r), "i")


def run():
    n = jax.local_device_count()
    x = np.random.RandomState(jax.process_index()).normal(size=(n, 2, 3)).astype(np.float32)
    r = rows(x)
    return np.asarray(use(x, r))
'''
    result = migrate_source(source, style="global")
    assert any(f.code == "PM607" and "`r` is given to every device (in_axes None)" in f.message
               for f in result.findings)
    assert "PM600" not in {f.code for f in result.findings}
    # One process: the same program goes global (the results are then one process's rows).
    single = migrate_source(source.replace(b"jax.process_index()", b"0"), style="global")
    assert "PM600" in {f.code for f in single.findings}


def test_a_caller_run_on_process_0_only_stays_faithful():
    """Its placements and collectives would wait for processes that never call it."""
    source = b'''\
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i")
def total(x):
    return jax.lax.psum(jnp.sum(x), "i")


def evaluate():
    n = jax.local_device_count()
    x = np.random.RandomState(0).normal(size=(n, 2, 3)).astype(np.float32)
    return np.asarray(total(x))


def run():
    result = evaluate() if jax.process_index() == 0 else None
    return {"r": result}
'''
    result = migrate_source(source, style="global")
    assert any(f.code == "PM607" and f.line == 20 and "`evaluate` runs only where "
               "`jax.process_index() == 0` holds" in f.message for f in result.findings)
    assert "PM600" not in {f.code for f in result.findings}


def test_a_bom_is_utf8_and_a_declared_latin1_file_stays_faithful():
    """The global pass edits UTF-8 text: a BOM file goes global and keeps its BOM; a file
    declared latin-1 keeps the faithful style with PM607 (it failed with PM005 before)."""
    body = (b"import jax\nimport numpy as np\n\n\n@jax.pmap\ndef double(x):\n    return 2 * x\n\n\n"
            b"def run():\n    n = jax.local_device_count()\n"
            b"    return np.asarray(double(np.ones((n, 3), np.float32)))\n")
    bom = migrate_source(b"\xef\xbb\xbf" + body, style="global")
    assert bom.source.startswith(b"\xef\xbb\xbf") and b"jax.pmap" not in bom.source
    assert "PM600" in {f.code for f in bom.findings}
    latin1 = migrate_source(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + body, style="global")
    codes = {f.code for f in latin1.findings}
    assert "PM607" in codes and "PM600" not in codes and "PM005" not in codes
    assert b"# caf\xe9\n" in latin1.source and b"_pmap_style_shard_map" in latin1.source


# -- no mesh context: the caller's own code runs as under pmap; nothing runs at import -----

_EAGER = '''import jax
import jax.numpy as jnp
import numpy as np


@jax.pmap
def double(x):
    return x * 2.0


def run():
    n = jax.local_device_count()
    h = double(np.arange(n * 3, dtype=np.float32).reshape(n, 3))
    alpha = jnp.float32(0.5)  # the user's own eager value, made between the steps
    return {"h": np.asarray(h), "alpha_devices": np.asarray(len(alpha.devices()))}
'''


def test_the_callers_own_eager_values_stay_on_one_device(tmp_path):
    """No `with jax.set_mesh(...)` around the caller: under one, `jnp.float32(0.5)` is placed
    on all 8 devices (ten times the cost of pmap's one-device value), and the migrated program
    would also compute something else than the original here."""
    result = migrate_source(_EAGER.encode(), style="global")
    assert "PM600" in {f.code for f in result.findings}
    assert b"set_mesh" not in result.source and b'mesh=_mesh("devices")' in result.source
    (tmp_path / "case.py").write_bytes(result.source)
    migrated = run_entry(tmp_path, "case:run", devices=8)
    assert migrated.ok, migrated.error
    alpha_devices, h = (migrated.output["arrays"][f"leaf{i}"] for i in range(2))  # key order
    assert int(alpha_devices) == 1
    np.testing.assert_array_equal(h, np.arange(24, dtype=np.float32) * 2.0)


@pytest.fixture(scope="module")
def global_corpus(tmp_path_factory) -> Path:
    """corpus/ migrated with `--style global` (once for the tests that read it)."""
    out = tmp_path_factory.mktemp("global") / "corpus"
    _cli("apply", "--style", "global", str(ROOT / "corpus"), "--out-dir", str(out), "--no-progress")
    return out


def _code_lines(path: Path) -> list[str]:
    """The lines of a module, or of a notebook's code cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text("utf-8"))["cells"]
        return [line for c in cells if c["cell_type"] == "code"
                for line in "".join(c["source"]).splitlines()]
    return path.read_text("utf-8", "replace").splitlines()


def _written_long_lines(before: list[str], after: list[str]) -> list[str]:
    """The lines of `after` past LINE_LIMIT that the migration wrote (not one of `before`)."""
    kept = {line.strip() for line in before}
    return [line for line in after if len(line) > LINE_LIMIT and line.strip() not in kept]


# Lines the migration writes past the limit, not yet wrapped (line_wrap.py leaves them): the
# input's own one-line forms, which a formatter would lay out first.
_LONG_LINES_LEFT = {
    # two statements on one input line (`t = ...; m = ...`): only the last one is wrapped
    ("fallback_axes", "t = jax.jit(_per_device_shard_map(total"),
    # a statement going on in a multi-line string: no bracket closes on its line
    ("fallback_axes", "m, note = jax.jit(_per_device_shard_map(largest"),
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_written_lines_fit_the_line_limit(case):
    """Issue 40: no line the global style writes is longer than 99 characters (a line the
    input had is the input's). Checked on after.py, the reviewed output, which
    test_rewrite_matches_reviewed_fixture ties to the tool."""
    long = _written_long_lines(_code_lines(case / "before.py"), _code_lines(case / "after.py"))
    assert [line for line in long if not any(
        case.name == name and line.strip().startswith(start)
        for name, start in _LONG_LINES_LEFT)] == []


def test_written_lines_of_the_global_corpus_fit_the_line_limit(global_corpus):
    """As the fixtures: every module and notebook of corpus/ (corpus/real/ too), its helper
    and contract text included. Before issue 40, `f"{x}"` of a replicated stack wrote an
    85-character tree_map into the field (jaxline_nfnets/utils.py: a 140-character line)."""
    long = {}
    for path in sorted(global_corpus.rglob("*")):
        if path.suffix in (".py", ".ipynb"):
            original = ROOT / "corpus" / path.relative_to(global_corpus)
            written = _written_long_lines(_code_lines(original), _code_lines(path))
            if written:
                long[str(path.relative_to(global_corpus))] = written
    assert long == {}
    assert "_device_rows(x)" in (global_corpus / "real" / "jaxline_nfnets" / "utils.py").read_text()


def test_a_formatted_stack_calls_one_device_rows_function_under_a_free_name():
    """`f"{x}"` of a replicated stack formats `_device_rows(x)`, the function written once,
    under a name the module leaves free. It rebuilds pmap's rows only for the text, the
    values stay global: no pmap-contract code (transforms/contract_names.py)."""
    source = (GLOBAL_FIXTURES / "host_format_replicated_stack" / "before.py").read_text()
    source = source.replace("\ndef run():", "\ndef _device_rows():\n    return 0\n\n\ndef run():")
    text = migrate_source(source.encode(), style="global").source.decode()
    tree = ast.parse(text)
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert defined.count("_device_rows") == 1 and defined.count("_device_rows_2") == 1
    assert 'f"stats {_device_rows_2(stats)} params {_device_rows_2(params)!s}"' in text
    assert 'f" host {_device_rows_2(host)}"' in text
    assert "lambda v: v[None].repeat(" not in text.split("def _device_rows_2(")[0]
    assert is_fully_global(text)
    assert max(len(line) for line in text.splitlines()) <= LINE_LIMIT


def test_a_module_formatting_no_stack_gets_no_device_rows_function():
    source = (GLOBAL_FIXTURES / "host_format_replicated_stack" / "before.py").read_text()
    source = source.replace('text = f"stats {stats} params {params!s}"', 'text = "stats"')
    source = source.replace('text += f" host {host}"', 'text += " host"')
    text = migrate_source(source.encode(), style="global").source.decode()
    assert "jax.jit" in text and "_device_rows" not in text


def test_importing_the_global_corpus_starts_no_backend(global_corpus):
    """Each module's `_mesh` runs at a step's first call or a caller's entry, never at import
    (a multi-process program must call jax.distributed.initialize first)."""
    out = global_corpus
    names = sorted(p.stem for p in out.glob("*.py"))
    assert sum(b"def _mesh(" in (out / f"{n}.py").read_bytes() for n in names) >= 17
    script = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(out)!r})\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        "from jax._src import xla_bridge\n"
        "print(json.dumps(sorted(xla_bridge._backends)))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    completed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                               text=True)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []


_FROM_IMPORT = """import jax
import numpy as np
from jax import pmap
from jax import pmap as pm


def f(x):
    return jax.lax.psum(x, "i")


p_f = pmap(f, axis_name="i")
{other}

def run():
    n = jax.local_device_count()
    return np.asarray(p_f(np.ones((n, 2), np.float32)))
"""


def test_from_jax_import_pmap_goes_when_no_site_is_left():
    text, codes, _ = _global(_FROM_IMPORT.format(other=""))
    assert "PM600" in codes
    assert "from jax import pmap" not in text


def test_from_jax_import_pmap_stays_while_a_kept_pmap_uses_it():
    other = "TRANSFORMS = {'pmap': pm}  # a value, not a call: kept (PM205)\n"
    text, codes, _ = _global(_FROM_IMPORT.format(other=other))
    assert {"PM600", "PM205"} <= codes
    assert "from jax import pmap\n" not in text  # p_f went global
    assert "from jax import pmap as pm\n" in text and "{'pmap': pm}" in text


@pytest.mark.parametrize("unpack, goes_global", [
    ("key, *rest = jax.random.split(jax.random.PRNGKey(0), 3)", True),
    ("first, *rest = [1.0, 2.0, 3.0]", True),
    ("first, *rest = jnp.stack([w] * n)", False),  # a list of device rows: no layout for it
    ("first, *rest = w, jnp.stack([w] * n)", False),
])
def test_a_starred_target_takes_plain_values_only(unpack, goes_global):
    source = f"""import jax
import jax.numpy as jnp


def run():
    n = jax.local_device_count()
    w = jnp.arange(3.0)
    {unpack}
    return jax.pmap(lambda v: v * 2)(jnp.stack([w] * n))
"""
    text, codes, findings = _global(source)
    assert ("PM600" in codes) == goes_global
    if not goes_global:
        assert any("starred target" in f.message for f in findings)


@pytest.mark.parametrize("call, vmapped", [
    ("jax.pmap(jnp.add)(jnp.linspace(0.0, 1.0, n), jnp.linspace(1.0, 2.0, num=n))", True),
    # `[:, 0]` and astype keep the keys' leading axis, the device count
    ("jax.pmap(jnp.add)(jnp.linspace(0.0, 1.0, n), keys[:, 0].astype(jnp.float32))", True),
    # row 0 of the keys is one key: its leading axis is not the device count
    ("jax.pmap(jnp.add)(jnp.linspace(0.0, 1.0, 2), keys[0].astype(jnp.float32))", False),
    ("jax.pmap(jnp.add, axis_name='i')(jnp.linspace(0.0, 1.0, n), jnp.linspace(1.0, 2.0, n))",
     False),  # an axis name: the function might use a collective over it
    ("jax.pmap(jnp.linalg.norm)(jax.random.normal(keys[0], (n, 3)))", True),  # n rows
    # a batch: the function sees one device's row, so the reshape keeps pmap's layout
    ("jax.pmap(jnp.linalg.norm)(np.arange(n * 6.0).reshape(n, 6))", True),
    ("jax.pmap(lambda k: jnp.sum(jax.random.uniform(k, (2,))))(keys)", True),
])
def test_functions_whose_body_is_not_read_run_as_vmap_over_stacked_rows(call, vmapped):
    source = f"""import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return np.asarray({call})
"""
    text, codes, findings = _global(source)
    assert ("PM600" in codes) == vmapped
    assert ("jax.vmap(" in text) == vmapped
    if not vmapped:
        assert "PM612" in codes  # pmap's calling contract, without the helper


@pytest.mark.parametrize("body, goes_global", [
    ("step = jax.pmap(jnp.tanh)\n    return step(x), step(jax.random.uniform(key, (n, 2)))", True),
    ("step = jax.pmap(jnp.tanh)\n    return step(x), step(x, x)", False),  # calls disagree
    ("step = jax.pmap(jnp.tanh)\n    return step(x=x)", False),  # a keyword call
])
def test_an_assigned_function_whose_body_is_not_read_takes_its_calls_arity(body, goes_global):
    source = f"""import jax
import jax.numpy as jnp


def run():
    n = jax.local_device_count()
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (n, 3))
    {body}
"""
    text, codes, _ = _global(source)
    assert ("PM600" in codes) == goes_global
    assert ("jax.vmap(jnp.tanh)" in text) == goes_global


def test_a_pmap_called_on_the_spot_inside_an_assert_is_followed_like_an_if_test():
    """What an assert reads is read on the host, as an if test is: a pmap built and called
    there goes global like the one in the return (was an internal error, KeyError in
    site_usage, on flashbax's tests; then kept on pmap's contract, the assert not followed)."""
    source = """import jax
import jax.numpy as jnp


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    assert (jax.pmap(lambda k: jax.random.uniform(k))(keys) >= 0).all()
    return jax.pmap(jnp.abs)(jax.random.normal(keys[0], (n, 2)))
"""
    text, codes, findings = _global(source)
    assert "PM005" not in codes and "PM612" not in codes
    assert [f.line for f in findings if f.code == "PM600"] == [8, 9]
    assert "assert (jax.jit(jax.shard_map(" in text


def test_an_import_the_module_never_used_is_not_removed():
    """`partial` imported for others (never loaded here) is not the rewrite's to remove; one
    that only the pmap decorators used is."""
    source = b'''from functools import partial

import jax
import numpy as np

PARTIAL = None


@jax.pmap
def step(x):
    return jax.lax.psum(x, "devices") if False else x


def run():
    n = jax.local_device_count()
    return np.asarray(step(np.arange(n, dtype=np.float32).reshape(n, 1)))
'''
    kept = migrate_source(source, style="global").source.decode()
    assert "from functools import partial" in kept
    used = source.replace(b"@jax.pmap", b"@partial(jax.pmap)")
    assert "import partial" not in migrate_source(used, style="global").source.decode()


def test_a_collective_step_under_a_parameters_condition_goes_global():
    """pmap's psum waits for every process there too, so the condition holds on all of them
    or the original hangs: the step is global, its batch made global without a wait."""
    call = "    loss = step(params, x)\n    if scale > 0:\n        loss = step(params, x)"
    result = _multiprocess(parameters="scale=1.0", call=call)
    codes = {f.code for f in result.findings}
    assert "PM600" in codes and "PM607" not in codes
    assert "    if scale > 0:\n        loss = step(params, x)\n" in result.source.decode()


def test_a_value_replicated_after_an_early_exit_keeps_pmaps_layout():
    """After `if ...: raise` (or return, break, continue), what follows runs on some processes
    only: a P() placement there would wait for the others (device_put checks every process
    placed the same value)."""
    result = _multiprocess(value="jnp.ones(3)", parameters="skip=False",
                           call="    if skip:\n        raise ValueError('skipped')\n"
                                "    scale = jax.device_put_replicated(jnp.ones(3), "
                                "jax.local_devices())\n    loss = step(scale, x)")
    text = result.source.decode()
    stacked = [f.message for f in result.findings if f.code == "PM611"]
    assert any("it runs only where `skip` holds (line" in m for m in stacked), stacked
    assert "NamedSharding(mesh, P()))" not in text.split("if skip")[1]
    assert 'host_local_array_to_global_array(scale, mesh, P("batch"))' in text


def test_a_step_without_collectives_on_process_0_only_goes_global():
    source = MULTIPROCESS_PROGRAM.format(
        value="jnp.ones(3)", prelude="", parameters="",
        call="    loss = 0.0\n    if jax.process_index() == 0:\n        loss = step(params, x)",
    ).replace('return jax.lax.pmean(jnp.sum(x * params), "batch")', "return x * params")
    result = migrate_source(source.encode(), style="global")
    codes = {f.code for f in result.findings}
    assert "PM600" in codes and "PM607" not in codes
    assert any(f.code == "PM506" and "`step` there has no collectives" in f.message
               for f in result.findings)


@pytest.mark.parametrize("guard, single", [
    ("    if jax.process_count() > 1:\n        raise ValueError('one host only')\n", True),
    ("    if jax.process_count() != 1:\n        raise ValueError('one host only')\n", True),
    ("    if jax.process_count() > 2:\n        raise ValueError('two hosts at most')\n", False),
])
def test_a_refusal_to_run_on_several_processes_makes_a_module_single_process(guard, single):
    """flax's pixelcnn example raises when `jax.process_count() > 1`, before any pmap."""
    source = MULTIPROCESS_PROGRAM.format(value="jnp.ones(3)", prelude="", parameters="",
                                         call=PLAIN_CALL)
    source = source.replace("    n = jax.local_device_count()\n    rng = np.random.RandomState("
                            "jax.process_index())", guard + "    n = jax.local_device_count()\n"
                            "    rng = np.random.RandomState(0)")
    text = migrate_source(source.encode(), style="global").source.decode()
    assert ("make_array_from_process_local_data" not in text) is single
    assert ('x = rng.normal(size=(n * 2, 3))' in text) is True


def test_a_pmap_outside_the_refusing_function_keeps_the_module_multi_process():
    source = MULTIPROCESS_PROGRAM.format(value="jnp.ones(3)", prelude="", parameters="",
                                         call=PLAIN_CALL)
    source = source.replace("def run():\n", "def run():\n    if jax.process_count() > 1:\n"
                            "        raise ValueError('one host only')\n")
    source = source.replace("@functools.partial(jax.pmap", "def other(x):\n    return "
                            "jax.pmap(lambda v: v)(x)\n\n\n@functools.partial(jax.pmap", 1)
    text = migrate_source(source.encode(), style="global").source.decode()
    assert "make_array_from_process_local_data" in text


def test_unreplicating_a_tuple_leaves_no_self_assignment():
    source = b'''\
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils


@functools.partial(jax.pmap, axis_name="batch")
def step(params, x):
    return jax.lax.pmean(params * jnp.sum(x), "batch")


def save(params, ema):
    params, ema = jax_utils.unreplicate((params, ema))
    return np.asarray(params) + np.asarray(ema)


def run():
    n = jax.local_device_count()
    params = jax_utils.replicate(jnp.ones(3))
    ema = jax_utils.replicate(jnp.ones(3))
    ema = ema
    params = step(params, np.ones((n, 2, 3), np.float32))
    params = jax_utils.unreplicate(params)
    return save(jax_utils.replicate(params), ema)
'''
    result = migrate_source(source, style="global")
    text = result.source.decode()
    assert "PM600" in {f.code for f in result.findings}
    assert "params, ema = (params, ema)" not in text and "params = params\n" not in text
    assert "    ema = ema\n" in text  # the original's own stays
    assert "def save(params, ema):\n    return np.asarray(params) + np.asarray(ema)" in text


def test_haikus_imagenet_example_goes_fully_global():
    """dm-haiku's imagenet example (corpus/real): its donated train state is no longer taken
    to hold what the loop passes beside it (keys split from one key, numbers, numpy draws;
    donation_values.py), so the stacked layout that serves both of `train_scalars`'s paths
    is proven: every site global, the state and batches in pmap's stacked rows (PM611)."""
    source = (ROOT / "corpus" / "real" / "haiku_imagenet_train.py").read_bytes()
    result = migrate_source(source, style="global")
    codes = {f.code for f in result.findings if f.code.startswith("PM6")}
    assert codes == {"PM600", "PM611"}, [f.to_text() for f in result.findings]
    assert b"_per_device_shard_map" not in result.source


def test_a_caller_may_call_a_function_whose_pmap_keeps_the_contract_multi_process():
    """flax's wmt: `per_host_sum_pmap` maps over one device per host, a device list made at
    run time, so its pmap keeps the calling contract; the training function that calls it
    with host values still goes global (no mesh context is set around either)."""
    prelude = '''

def per_host_sum(value):
    devices = [jax.local_devices(process_index=p)[0] for p in range(jax.process_count())]
    host_psum = jax.pmap(lambda v: jax.lax.psum(v, "hosts"), "hosts", devices=devices)
    return host_psum(np.broadcast_to(value, (1,) + np.shape(value)))[0]
'''
    call = PLAIN_CALL + "\n    total = per_host_sum(np.float32(len(x)))"
    result = _multiprocess(prelude=prelude, call=call)
    codes = {f.code for f in result.findings}
    assert "PM600" in codes and "PM608" not in codes, [f.to_text() for f in result.findings]
    assert any(f.code == "PM612" for f in result.findings)  # the per-host pmap
