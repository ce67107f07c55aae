"""Unreplicate idioms on pmap outputs (transforms/faithful/unreplicate.py).

Host-transfer reads of row 0 must lose the cross-device gather that `x[0]` compiles on the
migrated (sharded) outputs, and keep the value; reads kept on device must be reported and left
alone; anything that is not row 0 of a leading-axis pmap output must be left alone, silently.
"""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest
from conftest import legacy_python_or_skip
from libcst.codemod import CodemodContext

from equivalence.runner import run_entry
from transforms.pipeline import migrate_source
from transforms.target import DEFAULT_TARGET, TargetJax
from transforms.faithful.unreplicate import HELPER, Unreplicate

HEADER = '''\
import functools

import jax
import numpy as np


def body(x):
    return x * 2.0


def pair(x):
    return x, x + 1.0


p_body = jax.pmap(body, axis_name="i")
p_pair = jax.pmap(pair, axis_name="i")
'''


def migrate(code: str, header: str = HEADER):
    source = header + "\n\ndef f(x):\n" + textwrap.indent(textwrap.dedent(code), "    ")
    result = migrate_source(source.encode())
    body = result.source.decode().split("\ndef f(x):\n", 1)[1]
    ours = [f for f in result.findings if f.code.startswith("PM41") or f.code == "PM011"]
    return textwrap.dedent(body), ours


@pytest.mark.parametrize(
    "code, expected",
    [
        ("out = p_body(x)\nv = float(out[0])", "v = float(_first_replica(out))"),
        ("out = p_body(x)\nv = int(out[0])", "v = int(_first_replica(out))"),
        ("out = p_body(x)\nv = out[0].item()", "v = _first_replica(out).item()"),
        ("out = p_body(x)\nv = out[0].tolist()", "v = _first_replica(out).tolist()"),
        ("out = p_body(x)\nprint('v', out[0])", "print('v', _first_replica(out))"),
        ("out = p_body(x)\nv = np.asarray(out[0])", "v = np.asarray(_first_replica(out))"),
        ("out = p_body(x)\nv = np.array(out[0], np.float64)",
         "v = np.array(_first_replica(out), np.float64)"),
        ("out = p_body(x)\nv = jax.device_get(out[0])", "v = jax.device_get(_first_replica(out))"),
        ("a, b = p_pair(x)\nv = float(b[0])", "v = float(_first_replica(b))"),
        ("v = float(p_body(x)[0])", "v = float(_first_replica(p_body(x)))"),
        ("m = p_body({'l': x})\nv = float(m['l'][0])", "v = float(_first_replica(m['l']))"),
        ("out = p_body(x)\nv = jax.device_get(jax.tree.map(lambda a: a[0], out))",
         "v = jax.device_get(jax.tree.map(_first_replica, out))"),
        ("out = p_body(x)\nv = jax.device_get(jax.tree_util.tree_map(lambda a: a[0], out))",
         "v = jax.device_get(jax.tree_util.tree_map(_first_replica, out))"),
        ("out = p_body(x)\nv = np.asarray(jax.tree.map(lambda a: a[0], out))",
         "v = np.asarray(jax.tree.map(_first_replica, out))"),
    ],
)
def test_host_transfer_reads_are_rewritten(code, expected):
    body, findings = migrate(code)
    assert expected in body
    assert [f.code for f in findings] == ["PM410"]


@pytest.mark.parametrize(
    "code",
    [
        "out = p_body(x)\nv = out[0]",  # kept as a device array
        "out = p_body(x)\nv = out[0] + 1.0",
        "out = p_body(x)\nv = jax.jit(body)(out[0])",
        "out = p_body(x)\nv = float(out[0] + 1.0)",  # not *directly* the host argument
        "out = p_body(x)\nv = jax.tree.map(lambda a: a[0], out)",
    ],
)
def test_reads_kept_on_device_are_reported_and_left(code):
    body, findings = migrate(code)
    assert body.strip() == code.strip()
    assert [f.code for f in findings] == ["PM411"]


@pytest.mark.parametrize(
    "code",
    [
        "out = np.ones((8, 2))\nv = float(out[0][0])",  # not a pmap output
        "out = p_pair(x)\nv = np.asarray(out[0])",  # a tuple of outputs: [0] picks one
        "out = jax.pmap(body, 'i', out_axes=None)(x)\nv = float(out[0])",
        "out = jax.pmap(body, 'i', out_axes=1)(x)\nv = np.asarray(out[0])",
        "out = p_body(x)\nout = np.asarray(out)\nv = float(out[0])",  # rebound
        "out = p_body(x)\nfor out in [x]:\n    v = float(out[0])",  # rebound by a loop
        "v = [float(out[0]) for out in x]",  # comprehension variable
        "out = p_body(x)\nv = jax.tree.map(lambda out: out[0], {'a': x})",  # lambda parameter
        "def later():\n    return float(out[0])\nout = p_body(x)",  # use precedes the binding
        "global out\nout = p_body(x)\nv = float(out[0])",
        "out = p_body(x)\nv = float(out[1])",
    ],
)
def test_other_subscripts_are_left_alone_silently(code):
    body, findings = migrate(code)
    assert HELPER not in body
    assert findings == []


def test_parameter_with_the_same_name_is_not_trusted():
    source = HEADER + "\n\ndef g(out, x):\n    out = p_body(x)\n    return float(out[0])\n"
    result = migrate_source(source.encode())
    assert HELPER not in result.source.decode()


def test_decorated_partial_and_method_held_pmaps():
    source = HEADER + textwrap.dedent('''

        @functools.partial(jax.pmap, axis_name="i")
        def step(x):
            return x - 1.0


        @functools.partial(jax.pmap, axis_name="i", out_axes=None)
        def replicated(x):
            return jax.lax.psum(x, "i")


        class Trainer:
            def __init__(self):
                self.p = jax.pmap(body, axis_name="i")
                self.q = functools.partial(jax.pmap, axis_name="i")(body)

            def go(self, x):
                a = self.p(x)
                b = self.q(x)
                return float(a[0]), float(b[0]), float(step(x)[0]), float(replicated(x)[0])
    ''')
    result = migrate_source(source.encode())
    text = result.source.decode()
    results = ["float(_first_replica(a))", "float(_first_replica(b))",
               "float(_first_replica(step(x)))", "float(replicated(x)[0])"]
    assert "".join(f"            {r},\n" for r in results) in text  # one per line: wrapped


def test_suppressed_read_is_left_and_listed():
    body, findings = migrate("out = p_body(x)\nv = float(out[0])  # pmap-migrate: ignore[PM410]")
    assert "float(out[0])" in body
    assert [f.code for f in findings] == ["PM011"]


def test_flax_unreplicate():
    header = HEADER.replace("import numpy as np\n", "import numpy as np\nfrom flax import jax_utils\n")
    body, findings = migrate(
        "out = p_body(x)\n"
        "a = jax.device_get(jax_utils.unreplicate(out))\n"
        "b = jax_utils.unreplicate(out)\n"
        "c = jax.device_get(jax_utils.unreplicate(x))\n",
        header,
    )
    assert "a = jax.device_get(jax.tree_util.tree_map(_first_replica, out))" in body
    assert "b = jax_utils.unreplicate(out)" in body
    assert "c = jax.device_get(jax_utils.unreplicate(x))" in body
    assert [f.code for f in findings] == ["PM410", "PM412", "PM412"]


def test_flax_rewrite_adds_the_jax_import_it_uses():
    source = (
        "import jax as j\nfrom flax import jax_utils\n\n"
        "def f(x):\n    out = j.pmap(lambda v: v)(x)\n"
        "    return j.device_get(jax_utils.unreplicate(out))\n"
    )
    text = migrate_source(source.encode()).source.decode()
    assert "\nimport jax\n" in text
    assert "j.device_get(jax.tree_util.tree_map(_first_replica, out))" in text
    ast.parse(text)


def test_helper_is_written_once_and_lines_are_kept():
    source = HEADER + "\n\ndef f(x):\n    out = p_body(x)\n    return float(out[0]), int(out[0])\n"
    result = migrate_source(source.encode())
    text = result.source.decode()
    assert text.count(f"def {HELPER}(") == 1
    line = source.splitlines().index("    return float(out[0]), int(out[0])") + 1
    assert [f.line for f in result.findings if f.code == "PM410"] == [line, line]


def test_rule_runs_alone_as_a_libcst_codemod():
    """With libcst's own metadata (no shared pipeline), the rule makes the same rewrite."""
    source = HEADER + "\n\ndef f(x):\n    out = p_body(x)\n    return float(out[0])\n"
    rule = Unreplicate(CodemodContext(), DEFAULT_TARGET)
    text = rule.transform_module(cst.parse_module(source)).code
    assert "return float(_first_replica(out))" in text
    assert [f.code for f in rule.findings] == ["PM410"]


# -- compiled: the rewrite removes the gather and keeps the value --------------------------------

PROGRAM = '''\
import jax
import jax.numpy as jnp
import numpy as np


def body(x):
    return x * 2.0 + jax.lax.axis_index("i"), jnp.sum(x).astype(jnp.int32)


p_body = jax.pmap(body, axis_name="i")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    rows, total = p_body(x)
    p_subset = jax.pmap(body, axis_name="i", devices=jax.devices()[::-1][: n // 2])
    sub_rows, sub_total = p_subset(x[: n // 2] + 1.0)
    return {
        "row": np.asarray(rows[0]),
        "row_ref": np.asarray(rows)[0],
        "total": np.asarray(int(total[0])),
        "total_ref": np.asarray(int(np.asarray(total)[0])),
        "sub_row": np.asarray(sub_rows[0]),
        "sub_row_ref": np.asarray(sub_rows)[0],
        "sub_total": np.asarray(sub_total[0].item()),
        "sub_total_ref": np.asarray(np.asarray(sub_total)[0].item()),
    }
'''


def _run_migrated(tmp_path, source: str, python=None, target=DEFAULT_TARGET):
    migrated = migrate_source(source.encode(), target).source.decode()
    (tmp_path / "prog.py").write_text(migrated)
    options = {"python": python} if python else {}
    outcome = run_entry(tmp_path, "prog:run", devices=8, **options)
    assert outcome.ok, outcome.error
    return migrated, outcome


def _all_reduces(outcome) -> int:
    moved = outcome.compiled.data_movement_collectives()
    return sum(n for label, n in moved.items() if label.startswith("all-reduce"))


def _assert_same_values(outcome):
    """Leaves come in dict-key order: each read, then its host-side reference."""
    arrays = outcome.output["arrays"]
    leaves = [arrays[k] for k in sorted(arrays, key=lambda k: int(k.removeprefix("leaf")))]
    assert len(leaves) == 8
    for i, (a, b) in enumerate(zip(leaves[::2], leaves[1::2])):
        assert a.shape == b.shape and a.dtype == b.dtype and (a == b).all(), i


def test_migrated_host_reads_compile_no_gather_and_keep_values(tmp_path):
    migrated, outcome = _run_migrated(tmp_path, PROGRAM)
    assert migrated.count(f"{HELPER}(") == 5  # four reads and the definition
    _assert_same_values(outcome)
    assert _all_reduces(outcome) == 0


def test_without_the_rewrite_the_same_reads_compile_a_gather(tmp_path):
    """The control for the test above: suppressed, `x[0]` compiles an all-reduce."""
    suppressed = "\n".join(
        line + "  # pmap-migrate: ignore[PM410]" if "[0]" in line and "_ref" not in line else line
        for line in PROGRAM.splitlines()
    ) + "\n"
    migrated, outcome = _run_migrated(tmp_path, suppressed)
    assert f"{HELPER}(" not in migrated
    _assert_same_values(outcome)
    assert _all_reduces(outcome) >= 1


def test_helper_reads_the_same_values_on_legacy_jax(tmp_path):
    """Code migrated for an old target runs on jax 0.4.38 with the same helper."""
    python = legacy_python_or_skip()
    _, outcome = _run_migrated(tmp_path, PROGRAM, python=python, target=TargetJax.parse("0.4.38"))
    _assert_same_values(outcome)
