"""numpy semantics as data in the global style (issue 41, item 1): which indexing, broadcasting
arithmetic, shape-keeping calls and shape reads keep pmap's stacked layout (the device count as
the leading axis) of a value, so that a site given it goes global (PM600) instead of keeping
pmap's calling contract. Small programs of our own; two of them run on 8 fake devices."""

from __future__ import annotations

import ast
import sys

import pytest

from conftest import LEGACY_PYTHON, legacy_python_or_skip
from equivalence.check import compare_runs
from equivalence.runner import run_entry
from transforms.contract_names import pmap_contract_code
from transforms.global_view.stacked_rows import basic_index, broadcast_rows, indexed_rows
from transforms.global_view.values import Kind
from transforms.pipeline import migrate_source

# Broadcasting: `rows * column[:, None, None]` keeps the (n, 3, 4) leading axis (pmap
# cookbook's `rhs`): the fill is kept stacked, the arange(n) column indexed with `:` first.
BROADCAST = '''import jax
import jax.numpy as jnp
import numpy as np


def dense(a, b):
    return jnp.tanh(jnp.dot(a, b))


def run():
    n = jax.local_device_count()
    lhs = jnp.ones((n, 2, 3)) * 0.25
    rhs = jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[:, None, None]
    return {"out": np.asarray(jax.pmap(dense)(lhs, rhs))}
'''

# `x[..., 0]` of a step's stacked result, passed to a helper that sizes a fill by
# `x.shape[0]` (lorenz_ode's `plot_on_devices`); `.block_until_ready()` keeps the rows.
SHAPE_READ = '''import jax
import jax.numpy as jnp
import numpy as np


def integrate(path, scale):
    return jnp.cumsum(path, axis=0) * scale


def on_devices(all_xs, width):
    count = all_xs.shape[0]
    canvases = jnp.zeros((count, width))

    @jax.pmap
    def draw(canvas, xs):
        return canvas + jnp.sum(xs) * jnp.arange(width)

    return draw(canvases, all_xs)


def run():
    n = jax.local_device_count()
    paths = jnp.zeros((n, 5, 3))
    start = jax.random.uniform(jax.random.PRNGKey(1), shape=(n, 3))
    paths = paths.at[:, 0].set(start)
    paths = jax.pmap(integrate)(paths, 0.5 * jnp.ones(n)).block_until_ready()
    small = on_devices(paths[..., 0], 4)
    large = on_devices(jnp.tanh(paths[..., 2]).astype(jnp.float32), 6)
    return {"paths": np.asarray(paths), "small": np.asarray(small), "large": np.asarray(large)}
'''

# A site called inside a lambda given to jax.grad (pmap cookbook's `grad_of_outer`): the lambda
# is read with its parameter bound to the argument's kind; the gradient is shaped as `grid`.
GRAD_OF_SITE = '''import jax
import jax.numpy as jnp
import numpy as np


def run():
    n = jax.local_device_count()
    grid = jnp.arange(n * 2.0).reshape((n, 2)) / (4.0 * n)

    @jax.pmap
    def outer(x):
        return jnp.sin(x) * jnp.tanh(x).sum()

    out = {}
    out["outer"] = np.asarray(outer(grid))
    out["grad_of_outer"] = np.asarray(jax.grad(lambda x: jnp.sum(outer(x)))(grid))
    out["jit_of_outer"] = np.asarray(jax.jit(lambda x: outer(x) * 2.0)(grid))
    return out
'''

# Stacked rows rearranged away from axis 0: swapaxes, concatenate and stack along other axes,
# transpose keeping axis 0 first, expand_dims.
REARRANGED = '''import jax
import jax.numpy as jnp
import numpy as np


def step(a, b, c, d):
    return jnp.sum(a) + jnp.sum(b * 2.0) - jnp.sum(c) + jnp.sum(d)


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    grid = jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[:, None, None]
    grid = jnp.tanh(grid * 1.0)[:, None]
    a = jnp.swapaxes(grid, 1, 3)
    b = jnp.concatenate([a, a * 2.0], axis=-1)
    c = jnp.expand_dims(grid.transpose(0, 1, 3, 2), 2)
    d = jnp.stack([keys[:, 0], keys[:, 1]], axis=1).astype(jnp.float32)
    return {"out": np.asarray(jax.pmap(step)(a, b, c, d))}
'''


# jax.vmap with in_axes / out_axes 0 gives every result leaf the leading axis of what it maps:
# chains initialised by vmap over a dict of fills `np.ones(n)` (blackjax's multiple-chains
# notebook), and over per-device keys, keep that axis, the device count, into the step.
VMAPPED = '''import jax
import jax.numpy as jnp
import numpy as np


def init(position):
    return {"x": position["loc"] * 2.0, "y": jnp.sum(position["scale"])}


def run_chain(key, state, steps):
    def one(state, key):
        return {"x": state["x"] + jax.random.normal(key), "y": state["y"]}, None

    state, _ = jax.lax.scan(one, state, jax.random.split(key, steps))
    return state


def run():
    num_chains = jax.local_device_count()
    positions = {"loc": np.ones(num_chains, np.float32),
                 "scale": np.ones((num_chains, 3), np.float32)}
    states = jax.vmap(init)(positions)
    keys = jax.random.split(jax.random.PRNGKey(0), num_chains)
    loop = jax.pmap(run_chain, in_axes=(0, 0, None), static_broadcasted_argnums=2)
    out = loop(keys, states, 5)
    return {"x": np.asarray(out["x"]), "y": np.asarray(out["y"])}
'''

VMAPPED_KEYS = '''import jax
import jax.numpy as jnp
import numpy as np


def init(position):
    return {"x": position["loc"] * 2.0, "y": jnp.sum(position["scale"])}


def step(state, scale):
    return {"x": state["x"] * scale, "y": state["y"] + 1.0}


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    positions = jax.vmap(lambda k: {"loc": jax.random.normal(k), "scale": jnp.ones(3)})(keys)
    states = jax.vmap(init)(positions)
    out = jax.pmap(step, in_axes=(0, None))(states, 3.0)
    return {"x": np.asarray(out["x"]), "y": np.asarray(out["y"])}
'''


# n equal rows written as numpy repeats them: `jnp.repeat(x[None], n, axis=0)` over the
# parameters (in a tree_map lambda), and a stack of n copies `[scale for _ in range(n)]`: both
# replicated stacks, so the migrated program holds the one value, placed with P().
REPEATED = '''import jax
import jax.numpy as jnp
import numpy as np


def step(params, scale, x):
    y = jnp.tanh(x @ params["w"] + params["b"]) * scale
    return jax.lax.pmean(jnp.mean(y), "i"), y


def run():
    n = jax.local_device_count()
    params = {"w": np.ones((3, 2), np.float32) * 0.5, "b": np.zeros((2,), np.float32)}
    replicated = jax.tree_util.tree_map(lambda x: jnp.repeat(x[None], n, axis=0), params)
    scale = jnp.float32(2.0)
    scales = jnp.stack([scale for _ in range(n)])
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10.0
    loss, y = jax.pmap(step, axis_name="i")(replicated, scales, x)
    return {"loss": np.asarray(loss), "y": np.asarray(y)}
'''


# A draw of shape (n, 3) is led by the device count (pmap's stacked layout), as is the
# batch kept stacked beside it; tree_map of a lambda that keeps each leaf's leading axis
# (elementwise arithmetic, numpy's broadcasting rules) gives a tree in that layout too.
TREE_MAPPED = '''import jax
import jax.numpy as jnp
import numpy as np


def step(state, key):
    return {"x": state["x"] + jax.random.normal(key, (3,)), "y": state["y"] * 2.0}


def run():
    n = jax.local_device_count()
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    base = {"x": jax.random.normal(jax.random.PRNGKey(1), (n, 3)),
            "y": jnp.arange(n * 2.0).reshape(n, 2)}
    state = jax.tree_util.tree_map(lambda v: v * 0.5 + 1.0, base)
    out = jax.pmap(step)(state, keys)
    return {"x": np.asarray(out["x"]), "y": np.asarray(out["y"])}
'''


def _migrate(source: str):
    result = migrate_source(source.encode(), style="global")
    return result, {f.code for f in result.findings}


@pytest.mark.parametrize("source", [BROADCAST, SHAPE_READ, GRAD_OF_SITE, REARRANGED, VMAPPED,
                                    VMAPPED_KEYS, REPEATED, TREE_MAPPED],
                         ids=["broadcast", "shape_read", "grad_of_site", "rearranged", "vmapped",
                              "vmapped_keys", "repeated", "tree_mapped"])
def test_the_rows_facts_take_the_sites_global(source):
    result, codes = _migrate(source)
    assert "PM600" in codes and "PM612" not in codes and "PM604" not in codes
    assert pmap_contract_code(result.source) == []


def test_a_fill_sized_by_shape_zero_of_rows_is_replicated():
    """`x.shape[0]` of stacked rows is the device count, so the fill it sizes is a replicated
    stack: written without the device axis and placed with P()."""
    result, _ = _migrate(SHAPE_READ)
    text = result.source.decode()
    assert "jnp.zeros((width,))" in text and "jnp.zeros((count, width))" not in text


@pytest.mark.parametrize("rhs", [
    "jnp.ones((n, 3, 4))[None] * 2.0",  # leading axis 1, then n
    "jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[1:, None, None]",  # n - 1 rows
    "jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[0]",  # one number: fine, but
    # a value of as many axes whose leading one is unknown could broadcast it away (n = 1)
    "jnp.ones((n, 3, 4)) * jnp.ones((2, 3, 4))",
    "jnp.ones((n, 3, 4)) @ jnp.ones((n, 4, 4))[:, None]",  # not elementwise
])
def test_indexing_or_broadcasting_that_loses_the_leading_axis_keeps_the_contract(rhs):
    source = BROADCAST.replace(
        "jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[:, None, None]", rhs)
    result, codes = _migrate(source)
    if "[0]" in rhs:  # a number times the stack: the stack's rows, still the device count
        assert "PM600" in codes and "PM612" not in codes
        return
    assert "PM612" in codes and pmap_contract_code(result.source)


def test_the_gradient_for_a_replicated_stack_is_not_taken_as_replicated():
    """Each row of a stack's gradient is that row's own: merging it as one replicated value
    would sum them. The stack keeps pmap's layout (or the site its contract)."""
    source = GRAD_OF_SITE.replace("jnp.arange(n * 2.0).reshape((n, 2)) / (4.0 * n)",
                                  "jnp.stack([jnp.arange(2.0)] * n)")
    result, codes = _migrate(source)
    text = result.source.decode()
    assert "jnp.stack([jnp.arange(2.0)] * n)" in text


@pytest.mark.parametrize("line, moved", [
    ("a = jnp.swapaxes(grid, 0, 3)", "a = jnp.swapaxes(grid, 1, 3)"),
    ("a = grid.swapaxes(1, -4)", "a = jnp.swapaxes(grid, 1, 3)"),  # -4 of rank 4 is axis 0
    ("b = jnp.concatenate([a, a * 2.0], axis=0)", "b = jnp.concatenate([a, a * 2.0], axis=-1)"),
    ("b = jnp.concatenate([a, a * 2.0])", "b = jnp.concatenate([a, a * 2.0], axis=-1)"),
    ("c = jnp.expand_dims(grid.transpose(1, 0, 3, 2), 2)",
     "c = jnp.expand_dims(grid.transpose(0, 1, 3, 2), 2)"),
    ("c = jnp.expand_dims(grid, 0)", "c = jnp.expand_dims(grid.transpose(0, 1, 3, 2), 2)"),
    ("d = jnp.stack([keys[:, 0], keys[:, 1]]).astype(jnp.float32)",
     "d = jnp.stack([keys[:, 0], keys[:, 1]], axis=1).astype(jnp.float32)"),
])
def test_rearranging_axis_zero_keeps_the_contract(line, moved):
    """Moving, joining along or inserting before axis 0 makes another leading axis."""
    result, codes = _migrate(REARRANGED.replace(moved, line))
    assert "PM612" in codes and "PM600" not in codes


@pytest.mark.parametrize("old, new", [
    # the chains mapped on another axis, or their results stacked on another: the leading axis
    # of the vmap's result is not the one the fills have
    ("jax.vmap(init)(positions)", "jax.vmap(init, in_axes=1)(positions)"),
    ("jax.vmap(init)(positions)", "jax.vmap(init, out_axes=1)(positions)"),
    # five chains, whatever the device count (pmap of them fails on 8 devices)
    ("num_chains = jax.local_device_count()\n    positions",
     "num_chains = jax.local_device_count()\n    chains = 5\n    positions"),
])
def test_vmap_that_does_not_lead_with_the_device_count_keeps_the_contract(old, new):
    source = VMAPPED.replace(old, new)
    if "chains = 5" in new:
        source = source.replace("np.ones(num_chains,", "np.ones(chains,").replace(
            "np.ones((num_chains, 3)", "np.ones((chains, 3)")
    assert source != VMAPPED
    result, codes = _migrate(source)
    assert "PM612" in codes and "PM600" not in codes and pmap_contract_code(result.source)
    line = source.splitlines().index("    out = loop(keys, states, 5)") + 1
    blocker = next(f for f in result.findings if f.code == "PM612")
    assert f"argument 1 of `loop` (`states`) has no known layout (PM604, line {line})" \
        in blocker.message


def test_vmapped_states_keep_their_device_axis_and_say_why():
    """The stacked floor per value: the vmapped states go in as P(axis), squeezed in the
    body, and the finding names the vmap that made them one row per device."""
    result, _ = _migrate(VMAPPED)
    kept = [f.message for f in result.findings if f.code == "PM611"]
    assert any("`states`) keeps its device axis: `jax.vmap(init)(positions)` (line 22)" in m
               for m in kept)


def test_repeated_copies_are_replicated_stacks_written_once():
    result, _ = _migrate(REPEATED)
    text = result.source.decode()
    assert "jnp.repeat" not in text and "range(n)" not in text
    assert "replicated = jax.device_put(params, NamedSharding(mesh, P()))" in text
    assert "scales = jax.device_put(scale, NamedSharding(mesh, P()))" in text


@pytest.mark.parametrize("old, new, argument", [
    # along another axis, without the new axis (each row repeated: no equal rows), flattened
    ("jnp.repeat(x[None], n, axis=0)", "jnp.repeat(x[None], n, axis=1)", "replicated"),
    ("jnp.repeat(x[None], n, axis=0)", "jnp.repeat(x, n, axis=0)", "replicated"),
    ("jnp.repeat(x[None], n, axis=0)", "jnp.repeat(x[None], n)", "replicated"),
    # rows that differ: the loop's own index, a draw evaluated once per row; or 4 rows
    ("[scale for _ in range(n)]", "[scale * i for i in range(n)]", "scales"),
    ("[scale for _ in range(n)]", "[jax.random.normal(jax.random.PRNGKey(0)) for _ in range(n)]",
     "scales"),
    ("[scale for _ in range(n)]", "[scale for _ in range(4)]", "scales"),
])
def test_copies_that_are_not_n_equal_rows_keep_the_contract(old, new, argument):
    assert old in REPEATED
    result, codes = _migrate(REPEATED.replace(old, new))
    assert "PM612" in codes and "PM600" not in codes and pmap_contract_code(result.source)
    blocker = next(f for f in result.findings if f.code == "PM612")
    index = 0 if argument == "replicated" else 1
    assert f"argument {index} of the pmap at line 18 (`{argument}`) has no" in blocker.message \
        and "(PM604" in blocker.message


@pytest.mark.parametrize("function", [
    "lambda v: v[1:]",  # n - 1 rows
    "lambda v: jnp.sum(v, axis=0)",  # the device axis summed away (a generic call)
    "lambda v: v.T",  # the device axis moved last
    "lambda v: v * jnp.ones((2, 1, 1))",  # broadcast to a new leading axis of 2
])
def test_tree_map_that_may_lose_the_leading_axis_keeps_the_contract(function):
    source = TREE_MAPPED.replace("lambda v: v * 0.5 + 1.0", function)
    result, codes = _migrate(source)
    assert "PM612" in codes and "PM600" not in codes and pmap_contract_code(result.source)
    blocker = next(f for f in result.findings if f.code == "PM612")
    assert "argument 0 of the pmap at line 16 (`state`) has no known layout (PM604)" \
        in blocker.message


def test_a_literal_number_of_rows_is_named_in_the_finding():
    """pmap of `jnp.arange(1024)` fails on 8 devices (blackjax's notebook catches that): the
    site keeps the contract, and the finding says the rows are a literal count."""
    source = (
        "import jax\nimport jax.numpy as jnp\n\n\ndef fn(x):\n    return x + 1\n\n\n"
        "def run():\n    data = jnp.arange(1024)\n    return jax.pmap(fn)(data)\n")
    result, codes = _migrate(source)
    assert "PM612" in codes and "PM600" not in codes
    blocker = next(f for f in result.findings if f.code == "PM612")
    assert "(`data`) has no known layout: `jnp.arange(1024)` (line 10) has 1024 rows, not " \
        "provably one per device" in blocker.message


def _index(text: str) -> list | None:
    return basic_index(ast.parse(f"x[{text}]", mode="eval").body.slice)


@pytest.mark.parametrize("index, rank, result_rank", [
    (":, None, None", 1, 3),
    (":", None, None),
    (":, 0", 3, 2),
    ("..., 0", 3, 2),
    ("..., 0", None, None),  # an x of rank 1 leaves no axis: pmap of it raises anyway
    ("..., 0, :", None, None),
    ("..., None", 2, 3),
])
def test_indexing_that_keeps_the_device_axis(index, rank, result_rank):
    kind = indexed_rows(Kind("same", rank=rank, rows=True), _index(index))
    assert kind == Kind("same", rank=result_rank, rows=True)


@pytest.mark.parametrize("index, rank", [
    ("0", 2), ("1:", 2), ("None", 2), ("::2", 2),
    ("..., None", None),  # x of rank 0 after the Ellipsis... a None could lead: (1,)
    ("..., 1:", None),  # were x of rank 1, this slices the device axis
    ("..., 0, 0", 1),  # an IndexError in the original
])
def test_indexing_that_loses_or_may_lose_the_device_axis(index, rank):
    kind = indexed_rows(Kind("same", rank=rank, rows=True), _index(index))
    assert kind is None or not kind.rows


def test_a_plain_value_of_known_rank_keeps_a_rank_through_indexing():
    """Row 0 of `arange(n)` is a number, which a stack may be multiplied by."""
    assert indexed_rows(Kind("same", rank=1, rows=True), _index("0")) == Kind("same", rank=0)
    assert indexed_rows(Kind("same", rank=2), _index("None, 0")) == Kind("same", rank=2)


@pytest.mark.parametrize("index", ["i", ":, i", "[0, 1]", ":, x > 0", "..., ..."])
def test_only_basic_indices_of_literals_are_read(index):
    """A name may hold an array (advanced indexing can move axes to the front)."""
    assert _index(index) is None


def test_broadcasting_keeps_the_leading_axis_of_the_highest_rank_only():
    rows3 = Kind("same", rank=3, rows=True)
    assert broadcast_rows(ast.Mult(), rows3, Kind("same", rank=2)) == rows3
    assert broadcast_rows(ast.Add(), Kind("same", rank=1), rows3) == rows3
    assert broadcast_rows(ast.Sub(), rows3, rows3) == rows3
    assert broadcast_rows(ast.Mult(), rows3, Kind("same", rank=3)) is None
    assert broadcast_rows(ast.Mult(), Kind("same", rows=True), Kind("same", rank=1)) is None
    assert broadcast_rows(ast.Mult(), rows3, Kind("same", rank=4)) is None
    assert broadcast_rows(ast.MatMult(), rows3, Kind("same", rank=0)) is None
    assert broadcast_rows(ast.Mult(), Kind("same", rows=True), Kind("devcount")) == \
        Kind("same", rows=True)


@pytest.mark.equivalence
@pytest.mark.parametrize("source", [BROADCAST, SHAPE_READ, GRAD_OF_SITE, REARRANGED, VMAPPED,
                                    VMAPPED_KEYS, REPEATED, TREE_MAPPED],
                         ids=["broadcast", "shape_read", "grad_of_site", "rearranged", "vmapped",
                              "vmapped_keys", "repeated", "tree_mapped"])
def test_the_migrated_programs_compute_the_same(source, tmp_path):
    """Original on legacy JAX (pmap), migration on this one, 8 fake devices, compared through
    the layout map the migration records."""
    python = legacy_python_or_skip() if LEGACY_PYTHON else sys.executable
    result = migrate_source(source.encode(), style="global")
    (tmp_path / "orig").mkdir()
    (tmp_path / "new").mkdir()
    (tmp_path / "orig" / "case.py").write_text(source)
    (tmp_path / "new" / "case.py").write_bytes(result.source)
    layouts = {f.function: f.outputs for f in result.layouts}
    original = run_entry(tmp_path / "orig", "case:run", devices=8, python=python)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    report = compare_runs("case:run", 8, original, migrated, same_jax=False,
                          layouts=layouts.get("run", ()))
    assert report.verdict == "equivalent", report.differences
