"""Data placement (transforms/faithful/placement.py): the device_put_replicated / device_put_sharded
helpers and flax's replicate. The fixtures (tests/fixtures/placement_*) show every rewritten
and reported form and run original (jax 0.4.38) against migrated (current JAX); here: what
they cannot show. The helpers against the originals leaf by leaf in the same interpreter
(weak types, shard placement, PRNG keys, errors), communication and donation when a migrated
pmap consumes them, both targets, and the rule's edges."""

from __future__ import annotations

import ast
import textwrap

import pytest

from conftest import ROOT, legacy_python_or_skip
from equivalence.runner import run_entry
from transforms.pipeline import migrate_source
from transforms.helpers.placement_helpers import HELPER_MARKER, REPLICATED, SHARDED, SOURCES
from transforms.helpers.runtime_helper import helper_source
from transforms.target import TargetJax

OLD, NEW = TargetJax.parse("0.4.38"), TargetJax.parse("0.10")


MINE = {"PM011", "PM301", "PM302", *(f"PM40{i}" for i in range(1, 8))}


def migrate(text: str, target: TargetJax = NEW):
    """The migrated text and this rule's findings (other rules' are not this file's concern)."""
    result = migrate_source(textwrap.dedent(text).encode(), target)
    return result.source.decode(), [(f.line, f.code) for f in result.findings if f.code in MINE]


def body(source: str) -> str:
    """The migrated module without the helpers written into it."""
    tree = ast.parse(source)
    helpers = {REPLICATED, SHARDED, "_pmap_style_shard_map"}
    kept = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name in helpers)]
    return ast.unparse(ast.Module(kept, []))


# -- the helper text ------------------------------------------------------------------------


def test_helper_text_is_plain_jax_for_both_targets():
    for name, text in SOURCES.items():
        tree = ast.parse(text)
        (function,) = tree.body
        assert function.name == name and text.startswith(HELPER_MARKER)
        assert "jax.P(" not in text and "jax.P," not in text  # jax.P does not exist in 0.4.38
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert imported == {"collections.abc", "jax", "numpy"}  # inside the body, no tool import


def test_transform_modules_never_import_jax():
    for path in ("transforms/faithful/placement.py", "transforms/helpers/placement_helpers.py"):
        tree = ast.parse((ROOT / path).read_text())
        modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in modules if m and m.split(".")[0] in ("jax", "flax", "numpy")}


@pytest.mark.parametrize("target", [OLD, NEW], ids=str)
def test_both_targets_get_the_same_helpers_and_valid_code(target):
    source, _ = migrate(
        """
        import jax
        p = jax.device_put_replicated(params, jax.local_devices())
        b = jax.device_put_sharded(shards, jax.local_devices())
        """,
        target,
    )
    compile(source, "<migrated>", "exec")
    assert SOURCES[REPLICATED] in source and SOURCES[SHARDED] in source
    assert body(source).splitlines()[-2:] == [
        "p = _device_put_replicated(params, jax.local_devices())",
        "b = _device_put_sharded(shards, jax.local_devices())",
    ]


# -- the rule -------------------------------------------------------------------------------


def test_every_reference_is_renamed_and_from_imports_go():
    source, findings = migrate(
        """
        import functools
        from jax import device_put_replicated as rep, device_put_sharded
        put = functools.partial(rep, devices=devs)
        x = device_put_sharded(shards, devices=devs)
        """
    )
    assert "from jax import" not in source
    assert body(source).splitlines()[-2:] == [
        "put = functools.partial(_device_put_replicated, devices=devs)",
        "x = _device_put_sharded(shards, devices=devs)",
    ]
    assert findings == [(4, "PM301"), (5, "PM302")]


def test_unknown_forms_are_left_alone_with_a_finding():
    text = """
        import jax
        from flax.jax_utils import replicate
        jax.device_put_replicated = patched
        many = replicate(*trees)
        unknown = replicate(tree, devices, extra)
        table = {"replicate": replicate}
        """
    source, findings = migrate(text)
    assert source == textwrap.dedent(text)
    assert findings == [(4, "PM406"), (5, "PM406"), (6, "PM406"), (7, "PM406")]


def test_a_function_of_the_helpers_name_is_kept_and_the_helper_gets_a_free_name():
    text = """
        import jax
        from flax.jax_utils import replicate

        def _device_put_replicated(x, devices):
            return x

        _device_put_replicated_2 = None
        y = jax.device_put_replicated(x, devs)
        z = jax.device_put_sharded(shards, devs)
        w = replicate(state)
        """
    source, findings = migrate(text)
    assert findings == [(9, "PM301"), (10, "PM302"), (11, "PM401")]
    assert "def _device_put_replicated(x, devices):\n    return x\n" in source
    assert "y = _device_put_replicated_3(x, devs)" in source
    assert "z = _device_put_sharded(shards, devs)" in source
    assert "w = _device_put_replicated_3(state, jax.local_devices())" in source
    defined = [s.name for s in ast.parse(source).body if isinstance(s, ast.FunctionDef)]
    assert sorted(defined) == ["_device_put_replicated", "_device_put_replicated_3",
                               "_device_put_sharded"]
    # A second run recognises its own `_device_put_replicated_3`: nothing changes, and a new
    # call there goes to that helper, not to a fourth name.
    assert migrate_source(source.encode()).source == source.encode()
    again = migrate_source((source + "v = jax.device_put_replicated(x, devs)\n").encode())
    assert again.source.decode().endswith("v = _device_put_replicated_3(x, devs)\n")
    assert again.source.decode().count("def _device_put_replicated_3(") == 1


def test_flax_replicate_keeps_the_meaning_of_devices_none():
    source, findings = migrate(
        """
        from flax.jax_utils import replicate
        from flax import jax_utils
        a = replicate(state)
        b = replicate(state, None)
        c = jax_utils.replicate(state, devices=lambda: 0)
        d = replicate(state, mine or theirs)
        e = replicate(devices=devs, tree=state)
        """
    )
    assert body(source).splitlines() == [
        "import jax",  # (isort's order: `import` lines before `from` lines)
        "from flax import jax_utils",
        "a = _device_put_replicated(state, jax.local_devices())",
        "b = _device_put_replicated(state, jax.local_devices())",
        "c = _device_put_replicated(state, (lambda: 0) or jax.local_devices())",
        "d = _device_put_replicated(state, (mine or theirs) or jax.local_devices())",
        "e = _device_put_replicated(state, devs or jax.local_devices())",
    ]
    assert [code for _, code in findings] == ["PM401"] * 5


def test_flax_replicate_import_stays_while_used():
    source, _ = migrate(
        """
        import jax
        from flax.jax_utils import replicate
        a = replicate(state)
        fn = replicate
        """
    )
    assert "from flax.jax_utils import replicate" in source


def test_suppression_keeps_the_call_and_the_import():
    text = """
        from jax import device_put_replicated
        x = device_put_replicated(v, devs)  # pmap-migrate: ignore[PM301]
        """
    source, findings = migrate(text)
    assert source == textwrap.dedent(text)
    assert findings == [(3, "PM011")]


def test_second_run_changes_nothing():
    once, _ = migrate(
        """
        import jax
        from flax import jax_utils
        a = jax.device_put_replicated(x, jax.devices())
        b = jax.device_put_sharded([x, x], jax.devices()[:2])
        c = jax_utils.replicate(x)
        """
    )
    twice = migrate_source(once.encode())
    assert twice.source.decode() == once
    assert not [f for f in twice.findings if f.code in ("PM301", "PM302", "PM401", "PM407")]


def test_batch_reshape_findings():
    _, findings = migrate(
        """
        import jax
        import jax.numpy as jnp
        step = jax.pmap(f)
        def shard(x):
            return x.reshape((n, -1) + x.shape[1:])
        n = jax.local_device_count()
        a = jnp.reshape(x, newshape=(jax.device_count(), -1, 4))
        b = x.reshape(-1, jax.local_device_count())  # not a leading axis
        c = x.reshape((jax.device_count(), -1, *rest))
        d = jnp.arange(n * 4).reshape(n, 4)  # not a batch reshape: no -1
        """
    )
    assert findings == [(6, "PM404"), (8, "PM404"), (10, "PM404")]
    _, findings = migrate(
        """
        from jax import pmap
        import jax
        a = x.reshape(jax.device_count(), -1)
        if jax.process_index() == 0:
            print(pmap(f)(a))
        """
    )
    assert findings == [(4, "PM405")]
    # Without a pmap in the module (for example once migrated) the reshape is not reported.
    _, findings = migrate("import jax\na = x.reshape(jax.local_device_count(), -1)\n")
    assert findings == []


# -- running the helpers --------------------------------------------------------------------

# Executed with the helpers' text prepended: the helper against the original, leaf by leaf, in
# the same legacy interpreter. Returns the cases that differ.
_AGAINST_ORIGINAL = '''
import jax
import jax.numpy as jnp
import numpy as np


def describe(tree):
    out = [str(jax.tree_util.tree_structure(tree))]
    for leaf in jax.tree_util.tree_leaves(tree):
        data = jax.random.key_data(leaf) if jax.dtypes.issubdtype(
            leaf.dtype, jax.dtypes.prng_key) else leaf
        shards = sorted((s.index[0].start or 0, s.device.id) for s in leaf.addressable_shards)
        out.append((leaf.shape, str(leaf.dtype), leaf.weak_type, leaf.committed, shards,
                    np.asarray(data).tolist()))
    return repr(out)


def outcome(thunk):
    try:
        return describe(thunk())
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def run():
    devs = jax.local_devices()
    values = {
        "f32": np.arange(3, dtype=np.float32), "f64": np.arange(3.0), "i64": np.arange(3),
        "jax": jnp.arange(3.0), "weak0d": jnp.asarray(2.0), "weakvec": jnp.full((3,), 2.0),
        "float": 1.5, "int": 3, "bool": True, "complex": 1j, "np_scalar": np.float32(2),
        "bf16": jnp.ones(2, jnp.bfloat16), "tree": {"a": 1, "b": (np.ones((2, 2)), None)},
        "key": jax.random.key(0), "raw_key": jax.random.PRNGKey(1),
        "elsewhere": jax.device_put(jnp.arange(2.0), devs[7]), "empty": np.zeros((0, 2)),
    }
    shard_lists = {
        "arrays": lambda n: [np.full(2, i, np.float32) for i in range(n)],
        "ints": lambda n: list(range(n)),
        "tree": lambda n: [{"a": i, "b": (np.ones(2) * i, jnp.arange(3) + i)} for i in range(n)],
        "committed": lambda n: [jax.device_put(jnp.ones(2) * i, devs[i]) for i in range(n)],
        "mixed_64": lambda n: [np.ones(2) if i % 2 else np.ones(2, np.float32) for i in range(n)],
        "shape": lambda n: [np.ones(2 + (i == 1)) for i in range(n)],
        "keys": lambda n: [jax.random.key(i) for i in range(n)],
        "dtype": lambda n: [np.ones(2, np.int32 if i == 1 else np.float32) for i in range(n)],
        "weak": lambda n: [np.float32(1) if i == 1 else 1.0 for i in range(n)],
        "length": lambda n: [1.0] * (n + 1),
        "not_a_sequence": lambda n: np.ones((n, 2)),
    }
    device_sets = {"all": devs, "first4": devs[:4], "last4": devs[4:],
                   "reversed": tuple(reversed(devs[:3])), "one": devs[:1]}
    bad = []
    for dn, ds in device_sets.items():
        for name, v in values.items():
            a = outcome(lambda: jax.device_put_replicated(v, ds))
            b = outcome(lambda: _device_put_replicated(v, ds))
            if a != b:
                bad.append(f"replicated {name} on {dn}: {a} != {b}")
        for name, make in shard_lists.items():
            a = outcome(lambda: jax.device_put_sharded(make(len(ds)), ds))
            b = outcome(lambda: _device_put_sharded(make(len(ds)), ds))
            if a != b:
                bad.append(f"sharded {name} on {dn}: {a} != {b}")
    for name, ds in {"empty": [], "device": devs[0], "none": None, "array": np.array(devs)}.items():
        a = outcome(lambda: jax.device_put_replicated(1.0, ds))
        b = outcome(lambda: _device_put_replicated(1.0, ds))
        if a != b:
            bad.append(f"replicated devices={name}: {a} != {b}")
    return {"differences": np.array("\\n".join(bad))}
'''


def _program(tmp_path, text: str) -> None:
    (tmp_path / "prog.py").write_text(SOURCES[REPLICATED] + SOURCES[SHARDED] + text)


def test_helpers_reproduce_the_originals_leaf_by_leaf(tmp_path):
    python = legacy_python_or_skip()
    _program(tmp_path, _AGAINST_ORIGINAL)
    outcome = run_entry(tmp_path, "prog:run", devices=8, python=python)
    assert outcome.ok, outcome.error
    differences = str(outcome.output["arrays"]["leaf0"])
    assert differences.splitlines() == []


_CONSUMED_BY_MIGRATED_PMAP = '''
import jax
import numpy as np


def run():
    devs = jax.local_devices()
    results = {}
    for name, ds in {"all": devs, "first4": devs[:4]}.items():
        params = _device_put_replicated({"w": np.ones(3, np.float32), "lr": 0.5}, ds)
        batch = _device_put_sharded([np.full(3, i, np.float32) for i in range(len(ds))], ds)
        step = _pmap_style_shard_map(
            lambda p, b: (jax.tree_util.tree_map(lambda a: jax.lax.pmean(a * b.sum(), "i"), p),
                          b + 1),
            axis_name="i", donate_argnums=(0, 1))
        hlo = step.lower(params, batch).compile().as_text()
        moved = [op for op in ("all-gather", "all-to-all", "collective-permute") if op in hlo]
        out, _ = step(params, batch)
        results[name] = {
            "moved": np.array(",".join(moved)),
            "deleted": np.array([params["w"].is_deleted(), params["lr"].is_deleted(),
                                 batch.is_deleted()]),
            "w": np.asarray(out["w"]),
        }
    return results
'''


@pytest.mark.parametrize("target", [OLD, NEW], ids=str)
def test_migrated_pmap_consumes_and_donates_without_communication(tmp_path, target):
    python = legacy_python_or_skip() if target == OLD else None
    _program(tmp_path, helper_source(target) + _CONSUMED_BY_MIGRATED_PMAP)
    options = {"python": python} if python else {}
    outcome = run_entry(tmp_path, "prog:run", devices=8, **options)
    assert outcome.ok, outcome.error
    arrays = outcome.output["arrays"]
    by_path = {leaf["path"]: arrays[leaf["key"]] for leaf in outcome.output["leaves"]}
    for name, n in (("all", 8), ("first4", 4)):
        assert str(by_path[f"['{name}']['moved']"]) == ""
        assert by_path[f"['{name}']['deleted']"].tolist() == [True, True, True]
        assert by_path[f"['{name}']['w']"].shape == (n, 3)
