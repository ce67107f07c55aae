"""Nested pmap (one shard_map over a 2-D mesh) and the `_pmap_compat` drop-in.

The fixture pairs (tests/fixtures/nested_*, compat_*) show each form and run it, original vs
migrated. Here: the rules behind them, which would break quietly otherwise. JAX is imported
only in subprocesses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import libcst as cst
import pytest
from hypothesis import given, settings, strategies as st
from libcst.codemod import CodemodContext

from conftest import FIXTURES, legacy_python_or_skip
from regen_fixtures import HELPER_SNAPSHOT
from equivalence.compare import compare_outputs
from equivalence.runner import run_entry
from transforms.faithful.nested_pmap import Level, nested_specs
from transforms.helpers.nested_pmap_helper import NESTED_HELPER_NAME
from transforms.pipeline import migrate_source
from transforms.helpers.pmap_compat_helper import COMPAT_HELPER_NAME, compat_helper_source
from transforms.faithful.pmap_sites import PmapToShardMap
from transforms.helpers.runtime_helper import HELPER_NAME
from transforms.faithful.specs import AxesNotTranslatable, axes_to_specs
from transforms.target import DEFAULT_TARGET

HEADER = "import functools\nimport jax\n"


def migrate(body: str) -> tuple[str, list[str]]:
    result = migrate_source((HEADER + textwrap.dedent(body)).encode())
    return result.source.decode(), [f"{f.line} {f.code} {f.message}" for f in result.findings]


def codes(findings: list[str]) -> list[str]:
    return [f.split()[1] for f in findings if f.split()[1].startswith(("PM1", "PM2"))]


def user_code(source: str) -> str:
    """The migrated module without the inserted helpers."""
    return "\n".join(
        line for line in source.splitlines()
        if not line.startswith(("    ", "def _", "# pmap-migrate: helper", ")"))
    )


# -- nested pmap: specs ------------------------------------------------------------------------


def _specs(outer: dict[str, str], inner: dict[str, str]) -> tuple[str, str]:
    level = lambda args: Level(cst.Name("x"), {k: cst.parse_expression(v) for k, v in args.items()})
    names = (cst.parse_expression('"i"'), cst.parse_expression('"j"'))
    in_specs, out_specs = nested_specs(level(outer), level(inner), names, cst.Name("P"))
    code = lambda node: cst.Module(body=[]).code_for_node(node)
    return code(in_specs), code(out_specs)


@pytest.mark.parametrize(
    "outer, inner, expected_in",
    [
        ({}, {}, 'P("i", "j")'),
        ({"in_axes": "1"}, {}, 'P("j", "i")'),  # R10: inner 0 is before the outer axis
        ({"in_axes": "1"}, {"in_axes": "1"}, 'P(None, "i", "j")'),  # kj >= ki: one further
        ({"in_axes": "2"}, {"in_axes": "0"}, 'P("j", None, "i")'),
        ({"in_axes": "0"}, {"in_axes": "1"}, 'P("i", None, "j")'),
        ({"in_axes": "(0, None)"}, {"in_axes": "(0, None)"}, '(P("i", "j"), P())'),
        ({"in_axes": "(None, 0)"}, {"in_axes": "0"}, '(P("j"), P("i", "j"))'),
        ({"in_axes": "(0, 0)"}, {"in_axes": "(0, {'a': None})"}, """(P("i", "j"), {'a': P("i")})"""),
    ],
)
def test_nested_in_specs_place_the_inner_axis_after_the_outer_squeeze(outer, inner, expected_in):
    assert _specs(outer, inner)[0] == expected_in


@pytest.mark.parametrize(
    "out_axes, expected_out",
    [("0", 'P("i", "j")'), ("1", 'P("j", "i")'), ("2", 'P("j", None, "i")'), ("None", 'P("j")'),
     ("(0, None)", '(P("i", "j"), P("j"))')],
)
def test_nested_out_specs_stack_the_inner_axis_first(out_axes, expected_out):
    assert _specs({"out_axes": out_axes}, {})[1] == expected_out


def test_nested_call_becomes_one_helper_call_and_needs_only_the_nested_helper():
    source, findings = migrate('p = jax.pmap(jax.pmap(f, "j"), "i", in_axes=1)\n')
    assert 'p = _nested_pmap_shard_map(f, ("i", "j"), in_specs=P("j", "i"), out_specs=P("i", "j"))' in source
    assert f"def {NESTED_HELPER_NAME}(" in source
    assert f"def {HELPER_NAME}(" not in source and f"def {COMPAT_HELPER_NAME}(" not in source
    assert codes(findings) == ["PM100"]


def test_stacked_decorators_become_one_decorator():
    source, findings = migrate(
        """
        @functools.partial(jax.pmap, axis_name="i", donate_argnums=0)
        @functools.partial(jax.pmap, axis_name="j")
        def f(x):
            return x
        """
    )
    assert (  # one decorator, wrapped as a formatter would (transforms/line_wrap.py)
        '@functools.partial(\n    _nested_pmap_shard_map,\n    axis_names=("i", "j"),\n'
        '    in_specs=P("i", "j"),\n    out_specs=P("i", "j"),\n    donate_argnums=0,\n)\n'
        'def f(x):'
    ) in source
    assert codes(findings) == ["PM100"]


def test_bare_stacked_decorators_get_private_axis_names_and_functools():
    result = migrate_source(b"import jax\n\n@jax.pmap\n@jax.pmap\ndef f(x):\n    return x\n")
    source = result.source.decode()
    assert "import functools" in source
    assert 'axis_names=("_pmap_axis", "_pmap_inner_axis")' in source


@pytest.mark.parametrize(
    "site, reason",
    [
        ('jax.pmap(jax.pmap(f, "j", out_axes=1), "i")', "out_axes other than 0"),
        ('jax.pmap(jax.pmap(f, "j", static_broadcasted_argnums=1), "i")', "static_broadcasted_argnums"),
        ('jax.pmap(jax.pmap(f, "j"), "i", devices=ds)', "devices on the outer"),
        ('jax.pmap(jax.pmap(f, "j"), "i", axis_size=2)', "axis_size on the outer"),
        ('jax.pmap(jax.pmap(f, "j", backend="cpu"), "i")', "backend on the inner"),
        ('jax.pmap(jax.pmap(f, "j", donate_argnums=0), "i")', "donate_argnums on the inner"),
        ('jax.pmap(jax.pmap(f, "j"), "i", in_axes=AXES)', "in_axes of the outer pmap is not a literal"),
        ('jax.pmap(jax.pmap(f, "j", in_axes=-1), "i")', "negative axis"),
        ('jax.pmap(jax.pmap(f, "j", in_axes=(0, 0)), "i", in_axes=(0,))', "different lengths"),
        ('jax.pmap(jax.pmap(jax.pmap(f, "k"), "j"), "i")', "three or more levels"),
        ('jax.pmap(lambda x: jax.pmap(f, "j")(x), "i")', "holds another pmap"),
        ('jax.pmap(jax.pmap(f, "i"), "i")', "both levels name the axis"),
    ],
)
def test_nested_forms_not_covered_are_reported_and_left_alone(site, reason):
    source, findings = migrate(f"p = {site}\n")
    assert f"p = {site}" in source
    assert any(reason in f for f in findings), findings
    assert "PM100" not in codes(findings)


def test_pmap_inside_a_pmapped_def_is_reported_not_migrated():
    source, findings = migrate(
        """
        @jax.pmap
        def outer(x):
            return jax.pmap(g, "j")(x)
        """
    )
    assert codes(findings) == ["PM206", "PM206"]
    assert "@jax.pmap" in source


# -- the drop-in: where it is used ------------------------------------------------------------


def test_literal_sites_keep_the_readable_translation():
    source, findings = migrate('p = jax.pmap(f, "i", in_axes=(0, None))\n')
    assert 'p = _pmap_style_shard_map(f, "i", in_specs=(P("i"), P()))' in source
    assert f"def {COMPAT_HELPER_NAME}(" not in source


@pytest.mark.parametrize(
    "site, expected",
    [
        ("jax.pmap(fun, *args)", "_pmap_compat(fun, *args)"),
        ('jax.pmap(fun, axis_name="i", **kw)', '_pmap_compat(fun, axis_name="i", **kw)'),
        ("jax.pmap(fun, in_axes=AXES)", "_pmap_compat(fun, in_axes=AXES)"),
        ('jax.pmap(fun, "i", out_axes=make())', '_pmap_compat(fun, "i", out_axes=make())'),
        ("functools.partial(jax.pmap, in_axes=AXES)", "functools.partial(_pmap_compat, in_axes=AXES)"),
    ],
)
def test_runtime_arguments_go_to_the_drop_in_unchanged(site, expected):
    source, findings = migrate(f"p = {site}\n")
    assert f"p = {expected}" in source
    assert f"def {COMPAT_HELPER_NAME}(" in source and f"def {HELPER_NAME}(" in source
    assert codes(findings) == ["PM100"]


@pytest.mark.parametrize(
    "body",
    [
        "m = jax.pmap if c else jax.vmap\np = m(f)\n@m\ndef g(x):\n    return x\n",
        "T = {'p': jax.pmap, 'j': jax.jit}\np = T['p'](f, 'i')\n",
        "def apply(t, fun):\n    return t(fun)\np = apply(jax.pmap, f)\nq = apply(t=jax.pmap, fun=f)\n",
        "def main():\n    m = jax.pmap\n    return m(f)\n",
    ],
)
def test_values_whose_every_use_is_a_call_become_the_drop_in(body):
    source, findings = migrate(body)
    assert "jax.pmap" not in user_code(source)
    assert set(codes(findings)) == {"PM100"}


@pytest.mark.parametrize(
    "body, reason",
    [
        ("m = jax.pmap if c else jax.vmap\nok = m is jax.vmap\n", "used other than called at line 4"),
        ("T = {'p': jax.pmap}\nfor k, v in T.items():\n    pass\n", "subscripted and called"),
        ("def apply(t, fun):\n    return other(t, fun)\np = apply(jax.pmap, f)\n", "parameter `t`"),
        ("p = external(jax.pmap, f)\n", "not a function defined once in this module"),
        ("def pick():\n    return jax.pmap\n", "returned"),
        ("class C:\n    m = jax.pmap\n", "class attribute"),
        ("ms = [jax.pmap]\n", "tuple, list or set"),
        ("n = jax.pmap.__name__\n", "attribute read"),
        ("m = jax.pmap\ndef g(m):\n    return m.x\n", "used other than called"),  # shadowed: careful
    ],
)
def test_values_with_a_use_that_is_not_a_call_stay_reported(body, reason):
    source, findings = migrate(body)
    assert "_pmap_compat" not in user_code(source)
    assert any(" PM205 " in f and reason in f for f in findings), findings


def test_suppressed_value_use_is_kept():
    source, findings = migrate("m = jax.pmap  # pmap-migrate: ignore[PM100]\np = m(f)\n")
    assert "m = jax.pmap" in source
    assert f"def {COMPAT_HELPER_NAME}(" not in source


def test_value_replacement_also_works_when_the_rule_runs_alone():
    """As a plain libcst transform (no shared single-pass runner) the value is found too."""
    module = cst.parse_module(HEADER + "m = jax.pmap if c else jax.vmap\np = m(f)\n")
    rule = PmapToShardMap(CodemodContext(), DEFAULT_TARGET)
    out = rule.transform_module(module).code
    assert "m = _pmap_compat if c else jax.vmap" in out


def test_from_import_is_removed_when_the_value_was_the_last_use():
    result = migrate_source(b"from jax import pmap\n\nm = pmap\np = m(f)\n")
    source = result.source.decode()
    assert "from jax import pmap" not in source and "m = _pmap_compat" in source


# -- the drop-in: runtime translation agrees with the static one -------------------------------

_WORKER = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
from jax.sharding import PartitionSpec as P
seen = {}
def _pmap_style_shard_map(fun, axis_name, **kw):
    seen.update(kw, axis_name=axis_name)
    return fun
namespace = {"_pmap_style_shard_map": _pmap_style_shard_map}
exec(sys.argv[1], namespace)
compat = namespace["_pmap_compat"]
for line in sys.stdin:
    request = json.loads(line)
    seen.clear()
    try:
        made = compat(lambda *a: a, "i", **{request["what"]: eval(request["axes"])})
        if not seen:  # refused: the error comes when the function is called
            try:
                made()
            except Exception as error:
                answer = {"error": type(error).__name__}
        else:
            key = "in_specs" if request["what"] == "in_axes" else "out_specs"
            static = eval(request["static"]) if request["static"] else None
            answer = {"same": seen[key] == static, "runtime": repr(seen[key])}
    except Exception as error:
        answer = {"error": type(error).__name__}
    print(json.dumps(answer), flush=True)
"""


@pytest.fixture(scope="module")
def compat_worker():
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, compat_helper_source()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    yield worker
    worker.stdin.close()
    worker.wait(timeout=30)


def _ask(worker, axes: str, what: str, static: str | None) -> dict:
    worker.stdin.write(json.dumps({"axes": axes, "what": what, "static": static}) + "\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


_leaf = st.one_of(st.just("None"), st.integers(0, 3).map(str), st.integers(-2, -1).map(str))
_tree = st.recursive(
    _leaf,
    lambda sub: st.one_of(
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ",)"),
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.sampled_from("abc"), sub, min_size=1, max_size=2).map(
            lambda d: "{" + ", ".join(f"'{k}': {v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(axes=_tree, what=st.sampled_from(["in_axes", "out_axes"]))
def test_drop_in_translates_axes_as_the_tool_does(compat_worker, axes, what):
    try:
        static = axes_to_specs(
            cst.parse_expression(axes), spec_func=cst.Name("P"),
            axis_name=cst.parse_expression('"i"'), what=what,
        )
        static_text = cst.Module(body=[]).code_for_node(static)
    except AxesNotTranslatable as refused:
        # Refused statically (negative axis, list in_axes): the drop-in raises as legacy pmap
        # did, when the function is called.
        answer = _ask(compat_worker, axes, what, None)
        assert answer == {"error": {"PM201": "AssertionError", "PM202": "ValueError"}[refused.code]}
        return
    answer = _ask(compat_worker, axes, what, static_text)
    assert answer.get("same"), (axes, static_text, answer)


# -- the drop-in and the nested helper against legacy pmap ------------------------------------

_ERRORS = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np
if len(sys.argv) > 1:
    exec(sys.argv[1])
    pmap = _pmap_compat
else:
    pmap = jax.pmap
x = np.ones((8, 3), np.float32)
cases = {
    "negative_in": lambda: pmap(lambda a: a, "i", in_axes=-1)(x.T),
    "negative_out": lambda: pmap(lambda a: a, "i", out_axes=-1)(x),
    "list_in": lambda: pmap(lambda a, b: a, "i", in_axes=[0, 0])(x, x),
    "string_leaf": lambda: pmap(lambda a: a, "i", in_axes=("a",)),
    "not_callable": lambda: pmap(3),
    "no_fun": lambda: pmap(axis_name="i"),
    "global_arg_shapes": lambda: pmap(lambda a: a, global_arg_shapes=((1,),)),
    "no_mapped_axis": lambda: pmap(lambda a: a, in_axes=None)(x),
    "ok": lambda: float(np.asarray(pmap(lambda a, b: a * b, "i", in_axes=(1, None))(x.T, 2.0)).sum()),
}
for name, case in cases.items():
    try:
        print(name, case())
    except Exception as error:
        print(name, type(error).__name__)
"""


def test_drop_in_errors_are_legacy_pmaps():
    legacy = legacy_python_or_skip()
    helpers = migrate_source(b"import jax\np = jax.pmap(f, *a)\n").source.decode()
    helpers = helpers.split("\np = ")[0]
    run = lambda *cmd: subprocess.run(
        [*cmd], capture_output=True, text=True, timeout=300, check=True
    ).stdout.splitlines()
    assert run(sys.executable, "-c", _ERRORS, helpers) == run(legacy, "-c", _ERRORS)


def test_wrapper_module_migrated_alone_keeps_its_callers_in_other_modules(tmp_path):
    """Only the wrapper module is migrated; the caller module is not touched at all."""
    case = FIXTURES / "compat_wrapper_module"
    caller = (case / "caller.py").read_bytes()
    assert migrate_source(caller).source == caller  # nothing to migrate in the caller
    for side, wrapper in (("orig", "before.py"), ("new", "after.py")):
        (tmp_path / side).mkdir()
        shutil.copy(case / wrapper, tmp_path / side / "wrappers.py")
        shutil.copy(case / "caller.py", tmp_path / side / "caller.py")
    shutil.copy(HELPER_SNAPSHOT, tmp_path / "new")  # after.py imports its helpers from there
    original = run_entry(tmp_path / "orig", "caller:run", devices=8, python=legacy_python_or_skip())
    migrated = run_entry(tmp_path / "new", "caller:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    assert [str(d) for d in compare_outputs(original.output, migrated.output)] == []


def test_module_level_value_never_used_here_stays_reported():
    """Its uses, if any, are in other modules: not visible, so not replaced."""
    source, findings = migrate("TABLE = {'p': jax.pmap}\n")
    assert "TABLE = {'p': jax.pmap}" in source
    assert any(" PM205 " in f and "never uses" in f for f in findings), findings
