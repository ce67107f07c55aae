"""The helper templates (transforms/templates/) as real code: their text, and what they compute.

The transform path reads the templates as text; these tests import them (current JAX) or run
the text rendered for an old target (legacy JAX 0.4.38), on 8 fake devices, against jax.pmap
in the same interpreter.
"""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys

import pytest

from conftest import ROOT, legacy_python_or_skip
from transforms.helpers.helper_templates import FEATURES, MARKER_LINE, helper_text, template_source
from transforms.module_helpers import HELPER_NAMES
from transforms.target import TargetJax

MODERN, LEGACY = TargetJax.parse("0.10"), TargetJax.parse("0.4.38")
SHARD_MAP_HELPERS = ("_pmap_style_shard_map", "_nested_pmap_shard_map")


@pytest.mark.parametrize("name", sorted(HELPER_NAMES))
@pytest.mark.parametrize("target", [MODERN, LEGACY], ids=str)
def test_every_helper_is_one_marked_function(name, target):
    text = helper_text(name, target)
    assert text.startswith(MARKER_LINE + "\n") and text.endswith("\n")
    tree = ast.parse(text)
    assert [type(s) for s in tree.body] == [ast.FunctionDef] and tree.body[0].name == name
    assert "# pmap-migrate: if" not in text and "# pmap-migrate: end" not in text
    # The emitted text is the template file's tail, but for the target block.
    assert text.splitlines()[-1] == template_source(name).splitlines()[-1]


@pytest.mark.parametrize("name", SHARD_MAP_HELPERS)
def test_the_target_block_picks_the_shard_map_spelling(name):
    modern, legacy = helper_text(name, MODERN), helper_text(name, LEGACY)
    assert "jax.shard_map(" in modern and "check_vma=False" in modern
    assert "experimental.shard_map" not in modern and "check_rep" not in modern
    assert "from jax.experimental.shard_map import shard_map" in legacy
    assert "check_rep=False" in legacy and "check_vma=False,\n" not in legacy
    # 0.6.1 is the first release with the public spelling.
    assert helper_text(name, TargetJax.parse("0.6.1")) == modern
    assert helper_text(name, TargetJax.parse("0.6.0")) == legacy


def test_templates_import_without_starting_jax_and_the_transforms_never_import_them():
    script = """
import sys
import transforms.templates.pmap_compat, transforms.templates.first_replica
assert "jax" not in sys.modules, "a template imports jax at module level"
for name in list(sys.modules):
    if name.startswith("transforms"):
        del sys.modules[name]
from transforms.pipeline import migrate_source
migrate_source(open(sys.argv[1], "rb").read())
loaded = sorted(n for n in sys.modules if n.startswith("transforms.templates") or n == "jax")
assert not loaded, loaded
"""
    program = ROOT / "corpus" / "train_step_pmean_donate.py"
    subprocess.run([sys.executable, "-c", script, str(program)], check=True, cwd=ROOT, timeout=120)


# Each case calls a helper and jax.pmap (or the removed API, or plain indexing) the same way.
_RUN = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np

skip = sys.argv[2].split(",") if len(sys.argv) > 2 else []
if sys.argv[1] == "import":
    from transforms.templates.pmap_style_shard_map import _pmap_style_shard_map
    from transforms.templates.nested_pmap_shard_map import _nested_pmap_shard_map
    from transforms.templates.pmap_compat import _pmap_compat
    from transforms.templates.device_put_replicated import _device_put_replicated
    from transforms.templates.device_put_sharded import _device_put_sharded
    from transforms.templates.first_replica import _first_replica
else:
    exec(sys.stdin.read())
P = jax.sharding.PartitionSpec
devices = jax.devices()
x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
w = np.arange(3, dtype=np.float32)
grid = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)

def body(a, b):
    return jax.lax.psum(a * b, "i"), jax.lax.all_gather(a, "i")

def pair(helper, reference):
    return np.asarray(helper).tolist(), np.asarray(reference).tolist()

cases = {
    "mapped_and_broadcast": lambda: pair(
        _pmap_style_shard_map(body, "i", in_specs=(P("i"), P()))(x, w)[0],
        jax.pmap(body, "i", in_axes=(0, None))(x, w)[0]),
    "all_gather": lambda: pair(
        _pmap_style_shard_map(body, "i", in_specs=(P("i"), P()))(x, w)[1],
        jax.pmap(body, "i", in_axes=(0, None))(x, w)[1]),
    "axis_1_and_out_none": lambda: pair(
        _pmap_style_shard_map(lambda a: jax.lax.pmean(a, "i"), "i", in_specs=(P(None, "i"),),
                              out_specs=P())(x.T),
        jax.pmap(lambda a: jax.lax.pmean(a, "i"), "i", in_axes=1, out_axes=None)(x.T)),
    "static_and_kwargs": lambda: pair(
        _pmap_style_shard_map(lambda a, k, *, s: a * k + s, "i", static_argnums=(1,))(x, 2.0, s=x),
        jax.pmap(lambda a, k, *, s: a * k + s, "i", static_broadcasted_argnums=(1,))(x, 2.0, s=x)),
    "four_devices": lambda: pair(
        _pmap_style_shard_map(lambda a: jax.lax.psum(a, "i"), "i")(x[:4]),
        jax.pmap(lambda a: jax.lax.psum(a, "i"), "i")(x[:4])),
    "compat": lambda: pair(
        _pmap_compat(body, "i", in_axes=(0, None))(x, w)[0],
        jax.pmap(body, "i", in_axes=(0, None))(x, w)[0]),
    "nested": lambda: pair(
        _nested_pmap_shard_map(lambda a: jax.lax.psum(a, "j") + jax.lax.axis_index("i"),
                               ("i", "j"), in_specs=(P("i", "j"),), out_specs=P("i", "j"))(grid),
        # Nested pmap no longer runs on current JAX: what legacy pmap gives, by hand.
        grid.sum(axis=1, keepdims=True) + np.zeros_like(grid) + np.arange(2)[:, None, None]),
    "replicated": lambda: pair(_device_put_replicated(w, devices), np.stack([w] * 8)),
    "sharded": lambda: pair(_device_put_sharded(list(x), devices), x),
    "first_replica": lambda: pair(
        _first_replica(_pmap_style_shard_map(lambda a: a + 1, "i")(x)), x[0] + 1),
}
print(json.dumps({name: case() for name, case in cases.items() if name not in skip}))
"""


def _run_helpers(python: str, mode: str, stdin: str = "", skip: tuple[str, ...] = ()) -> dict:
    done = subprocess.run(
        [python, "-c", _RUN, mode, ",".join(skip)], input=stdin, capture_output=True, text=True,
        timeout=300,
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _assert_same(results: dict) -> None:
    for name, (helper, reference) in results.items():
        assert helper == reference, name


def test_imported_templates_compute_what_pmap_computes():
    _assert_same(_run_helpers(sys.executable, "import"))


def test_the_multiprocess_block_picks_the_variant():
    single = helper_text("_pmap_style_shard_map", MODERN, FEATURES - {"multiprocess"})
    multi = helper_text("_pmap_style_shard_map", MODERN)
    assert "multihost_utils" not in single and "process_count" not in single
    assert "multihost_utils.host_local_array_to_global_array" in multi
    assert "one process or several" in multi and "one process or several" not in single
    # One text: pmap's argument checks and messages are the same in both variants.
    for message in ("inconsistent sizes for array axes", "must be a tree prefix",
                    "logical devices, but only", "'devices' argument to pmap must be non-empty"):
        assert message in single and message in multi

_SUBSETS = [frozenset(c) for k in range(len(FEATURES) + 1)
            for c in itertools.combinations(sorted(FEATURES), k)]


@pytest.mark.parametrize("target", [MODERN, LEGACY], ids=str)
def test_every_feature_variant_is_one_function_with_only_its_blocks(target):
    for features in _SUBSETS:
        text = helper_text("_pmap_style_shard_map", target, features)
        assert "# pmap-migrate: if" not in text and "# pmap-migrate: end" not in text, features
        tree = ast.parse(text)
        assert [s.name for s in tree.body] == ["_pmap_style_shard_map"], features
        parameters = {a.arg for a in tree.body[0].args.kwonlyargs}
        assert ("static_argnums" in parameters) == ("static" in features)
        assert ("donate_argnums" in parameters) == ("donate" in features)
        assert ("devices" in parameters) == ("devices" in features)
        assert ("onto_mesh" in text) == ("committed" in features)
        assert ('"compiled"' in text) == ("cached" in features)
        assert ("multihost_utils" in text) == ("multiprocess" in features)
        # pmap's checks and their messages are in every variant.
        for message in ("inconsistent sizes for array axes", "must be a tree prefix",
                        "logical devices, but only", "requires at least one argument"):
            assert message in text, (features, message)


def test_a_module_using_no_feature_gets_a_short_helper():
    # 106, and 7 for the mapped size read once per argument structure and shapes: 1.011 ->
    # 0.999 of pmap per blocked step on a TPU v5e (benchmarks/dp_step_tpu_v5e.txt)
    assert len(helper_text("_pmap_style_shard_map", MODERN, frozenset()).splitlines()) <= 113


# (the features a case calls for, the cases that need them)
_NEEDS = {"static": ("static_and_kwargs",)}


@pytest.mark.parametrize("features", [
    FEATURES, FEATURES - {"multiprocess"}, frozenset(), frozenset({"cached", "committed"}),
    frozenset({"static", "donate"}),
], ids=lambda f: "+".join(sorted(f)) or "none")
def test_emitted_texts_compute_what_pmap_computes(features):
    """What a module gets, each variant, run in one process (2 processes: test_multiprocess_*).
    `_pmap_compat` calls the full helper, so a variant without some feature runs without it."""
    names = ["_pmap_style_shard_map", "_nested_pmap_shard_map", "_device_put_replicated",
             "_device_put_sharded", "_first_replica"]
    skip = [case for feature, cases in _NEEDS.items() if feature not in features for case in cases]
    if features == FEATURES or features == FEATURES - {"multiprocess"}:
        names.append("_pmap_compat")
    else:
        skip.append("compat")
    text = "".join(helper_text(name, MODERN, features) if name == "_pmap_style_shard_map"
                   else helper_text(name, MODERN) for name in names)
    _assert_same(_run_helpers(sys.executable, "text", text, tuple(skip)))


def test_templates_for_an_old_target_compute_what_legacy_pmap_computes():
    text = "".join(helper_text(name, LEGACY) for name in (
        "_pmap_style_shard_map", "_nested_pmap_shard_map", "_pmap_compat",
        "_device_put_replicated", "_device_put_sharded", "_first_replica"))
    _assert_same(_run_helpers(legacy_python_or_skip(), "text", text))


def test_a_module_gets_the_features_its_sites_use_and_keeps_them_when_migrated_again():
    from transforms.pipeline import migrate_source

    # (`n` keeps `import jax` used: the new sites below are written as jax.pmap)
    first = migrate_source(
        b'import jax\n\nn = jax.device_count()\np = jax.pmap(lambda x: x * 2, axis_name="i")\n').source
    assert helper_text("_pmap_style_shard_map", MODERN, frozenset()).encode() in first
    # A new plain site: the module keeps its helper.
    plain = first + b'\nq = jax.pmap(lambda x: x * 3, axis_name="i")\n'
    assert migrate_source(plain).source == (
        first + b'\nq = _pmap_style_shard_map(lambda x: x * 3, axis_name="i")\n')
    # A new site in a function with static arguments: the helper gains both features.
    static = first + (b'\n\ndef step(x):\n    return jax.pmap(lambda x, k: x * k, axis_name="i", '
                      b'static_broadcasted_argnums=1)(x, 2)\n')
    again = migrate_source(static).source
    assert again.count(b"def _pmap_style_shard_map(") == 1
    features = frozenset({"static", "cached"})
    assert helper_text("_pmap_style_shard_map", MODERN, features).encode() in again
    assert migrate_source(again).source == again
