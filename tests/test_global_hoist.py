"""Function-local global sites built once at module level (transforms/global_view/hoist.py).

The fixture pair `fixtures_global/hoist_local_sites` shows the rewrite and is run against the
original by test_global_view.py; these tests pin each boundary of the rule, and that the
hoisted step really compiles once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from regen_fixtures import GLOBAL_FIXTURES
from transforms.global_view.hoist import hoist_local_sites
from transforms.pipeline import migrate_source

HEAD = """import jax
import numpy as np


def total(x):
    return jax.lax.psum(x, "i")


"""

RUN = """def run():
    n = jax.local_device_count()
    x = np.ones((n, 2), np.float32)
{body}
"""


def _global(source: str) -> tuple[str, list]:
    result = migrate_source(source.encode(), style="global")
    return result.source.decode(), result.findings


PARAMS = {("f", "p"): "v", ("f", "q"): "x", ("f", "total"): "x"}


def _run(body: str, extra: str = "") -> str:
    return HEAD + extra + RUN.format(body=textwrap.indent(textwrap.dedent(body), "    "))


def _hoisted(text: str, name: str) -> bool:
    return any(line.startswith(f"def {name}(") for line in text.splitlines())


def test_a_local_site_of_module_names_moves_above_its_function_with_its_comment():
    text, findings = _global(_run("""
        # the step
        p_total = jax.pmap(total, axis_name="i")
        return np.asarray(p_total(x))"""))
    # A def, so that its mesh is built at its first call, not at import.
    assert "# the step\n@jax.jit\ndef p_total(x):\n    return jax.shard_map(\n        total," in text
    assert 'mesh=_mesh("i")' in text and text.index("def p_total(") < text.index("def run():")
    assert "    p_total = " not in text
    assert any(f.code == "PM600" and "built once, at module level as `p_total`" in f.message
               for f in findings)


@pytest.mark.parametrize("body, extra", [
    # reads a local
    ("""
     k = 2.0
     p = jax.pmap(lambda v: jax.lax.psum(v * k, "i"), axis_name="i")
     return np.asarray(p(x))""", ""),
    # the local name is a builtin: a module-level `max` would shadow it everywhere
    ("""
     max = jax.pmap(total, axis_name="i")
     return np.asarray(max(x))""", ""),
    # another top-level statement uses the name: it would start seeing the hoisted value
    ("""
     p = jax.pmap(total, axis_name="i")
     return np.asarray(p(x))""", "def other():\n    return p\n\n\n"),
    # declared global somewhere
    ("""
     p = jax.pmap(total, axis_name="i")
     return np.asarray(p(x))""", "def other():\n    global p\n    p = 1\n\n\n"),
], ids=["reads_a_local", "builtin_name", "name_used_elsewhere", "declared_global"])
def test_a_local_site_stays_where_moving_it_could_change_what_it_is(body, extra):
    text, findings = _global(_run(body, extra))
    assert "jax.jit(jax.shard_map(" in text and "pmap(" not in text.split("def run")[1]
    assert not _hoisted(text, "p") and not _hoisted(text, "max")
    assert not any("built once" in f.message for f in findings)


def test_the_only_statement_of_a_block_and_a_walrus_stay():
    text = HEAD + "def f(flag):\n    if flag:\n        p = jax.jit(jax.shard_map(total))\n" \
        "    q = jax.jit(jax.shard_map((y := total)))\n    return q\n"
    assert hoist_local_sites(text, "jax", {("f", "p"), ("f", "q")}, set(), PARAMS,
                             "functools.partial") == (text, {})


def test_a_later_definition_or_a_rebound_constant_is_not_read_at_import():
    text = HEAD + "K = 1\nK = 2\n\n\ndef f():\n    p = jax.jit(jax.shard_map(lambda v: v * K))\n" \
        "    q = jax.jit(jax.shard_map(late))\n    return p, q\n\n\ndef late(x):\n    return x\n"
    assert hoist_local_sites(text, "jax", {("f", "p"), ("f", "q")}, set(), PARAMS,
                             "functools.partial") == (text, {})


def test_inline_sites_get_one_fresh_module_name_per_text():
    text = HEAD + ("def f(x):\n    a = jax.jit(jax.shard_map(total))(x)\n"
                   "    b = jax.jit(jax.shard_map(total))(x + 1)\n    return a, b\n")
    new, moved = hoist_local_sites(text, "jax", set(), {("f", "total")}, PARAMS,
                                   "functools.partial")
    assert moved == {("f", "total"): "total_sharded"}
    assert new.count("@jax.jit\ndef total_sharded(x):\n    return jax.shard_map(total)(x)") == 1
    assert "a = total_sharded(x)" in new and "b = total_sharded(x + 1)" in new
    taken = text.replace("def f(x):", "total_sharded = None\n\n\ndef f(x):")
    assert hoist_local_sites(taken, "jax", set(), {("f", "total")}, PARAMS,
                             "functools.partial") == (taken, {})


def test_the_hoisted_steps_compile_once_over_repeated_runs(tmp_path):
    """What the move is for: pmap cached a step built in a function, and jit of a shard_map
    made on each call would compile on each call. Three runs, one compiled program each."""
    after = GLOBAL_FIXTURES / "hoist_local_sites" / "after.py"
    (tmp_path / "case.py").write_bytes(after.read_bytes())
    script = ("import json, jax, case\nfor _ in range(3):\n    jax.block_until_ready(case.run())\n"
              "print(json.dumps([case.p_total._cache_size(), case.scaled_sharded._cache_size()]))")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, 1]



def test_an_inline_lambda_site_moves_under_its_assignment_s_name():
    """`sq = jax.pmap(lambda v: v * v)(x)` made a new lambda, so a new jit, on every call: it
    compiled on every run(). Moved, it is `sq_sharded`; a lambda reading a local, or one whose
    result has no single name, stays."""
    text, findings = _global(_run("""
        sq = jax.pmap(lambda v: v * v)(x)
        k = 2.0
        scaled = jax.pmap(lambda v: v * k)(x)
        lo, hi = jax.pmap(lambda v: (v - 1, v + 1))(x)
        return np.asarray(sq), np.asarray(scaled), np.asarray(lo), np.asarray(hi)"""))
    assert _hoisted(text, "sq_sharded") and "    sq = sq_sharded(x)" in text
    assert text.index("def sq_sharded(") < text.index("def run():")
    assert not _hoisted(text, "scaled_sharded") and text.count("jax.jit(jax.shard_map(") == 2
    assert any(f.code == "PM600" and "built once, at module level as `sq_sharded`" in f.message
               for f in findings)
