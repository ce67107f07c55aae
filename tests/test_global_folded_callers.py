"""A function that calls a step and is called by another caller is read inside that caller,
given its values (transforms/global_view/callers.py `fold_callers`); the fixture
tests/fixtures_global/caller_called_by_caller shows the rewrite and runs it. These are the
cases around it: where it is folded, and where it must not be."""

from __future__ import annotations

import ast

import pytest

from transforms.global_view.callers import fold_callers, find_callers
from transforms.global_view.site_discovery import find_sites
from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers
from transforms.reading.names import ImportTable

PROGRAM = b'''import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="batch")
def train_step(state, batch):
    return jax.tree_util.tree_map(lambda x: x + jnp.mean(batch), state)


cross_replica_mean = jax.pmap(lambda x: jax.lax.pmean(x, "x"), "x")


def sync(state):
    return state.replace(stats=cross_replica_mean(state.stats))


def run(state):
    n = jax.local_device_count()
    for i in range(3):
        state = train_step(state, np.random.RandomState(i).normal(size=(n, 2)))
        state = sync(state)
    return state
'''


def folded(source: bytes) -> tuple[dict, dict]:
    tree = ast.parse(source)
    sites, _ = find_sites(tree, ImportTable.from_tree(tree).imported)
    callers, _ = find_callers(tree, {s.key: s for s in sites}, {})
    return fold_callers(tree, {s.key: s for s in sites}, callers), callers


def codes_at(source: bytes, line: int) -> list[str]:
    findings = with_named_blockers(migrate_source(source, style="global").findings)
    return [f.code for f in findings if f.line == line]


def test_a_caller_called_only_by_callers_is_folded_into_them():
    functions, callers = folded(PROGRAM)
    assert functions == {"sync": {"cross_replica_mean"}}
    assert callers == {"run": {"train_step", "cross_replica_mean"}}


@pytest.mark.parametrize("use", [
    "other = sync",  # a value handed on: its calls are not all seen
    "results = list(map(sync, []))",  # called by map, as a value
])
def test_a_caller_used_any_other_way_keeps_its_own_analysis(use):
    functions, callers = folded(PROGRAM + b"\n\n" + use.encode() + b"\n")
    assert functions == {} and "sync" in callers


def test_a_function_that_calls_it_becomes_a_caller_of_its_sites():
    """`elsewhere(s)` called no site, but `sync`'s parameter feeds its pmap: sync is read
    inside every function that calls it, elsewhere included, which becomes a caller. Its `s`
    is unknown there, so the fixpoint unfolds sync again, with the findings it had before."""
    source = PROGRAM + b"\n\ndef elsewhere(s):\n    return sync(s)\n"
    functions, callers = folded(source)
    assert functions == {"sync": {"cross_replica_mean"}}
    assert callers["elsewhere"] == {"cross_replica_mean"} and "sync" not in callers
    assert codes_at(source, 17) == ["PM604"]


def test_a_function_whose_parameters_feed_no_site_stays_a_caller_of_its_own():
    """`train(steps)` knows what its sites get: a function calling it does not host it."""
    source = PROGRAM.replace(b"def run(state):", b"def run(state, steps=3):") + (
        b"\n\ndef train(steps):\n    x = np.ones((jax.local_device_count(), 2))\n"
        b"    return train_step(x, x) if steps else None\n\n\n"
        b"def main():\n    return train(2)\n")
    functions, callers = folded(source)
    assert "train" not in functions and "train" in callers and "main" not in callers


def test_a_caller_without_parameters_is_not_folded():
    source = PROGRAM.replace(b"def sync(state):\n    return state.replace(",
                             b"def sync():\n    state = None\n    return state.replace(")
    source = source.replace(b"state = sync(state)", b"state = sync()")
    assert folded(source)[0] == {}


def test_a_caller_of_a_donating_site_is_not_folded():
    source = PROGRAM.replace(b'lax.pmean(x, "x"), "x")', b'lax.pmean(x, "x"), "x", donate_argnums=0)')
    assert folded(source)[0] == {}


def given_state(source: bytes, rebuild: bytes) -> bytes:
    """run() makes its own replicated state; sync rebuilds it with `rebuild`."""
    source = source.replace(b"def run(state):\n", b"def run():\n    state = jax.device_put_"
                            b"replicated({'w': jnp.ones(2)}, jax.local_devices())\n")
    return source.replace(b"state.replace(stats=cross_replica_mean(state.stats))", rebuild)


def test_a_folded_caller_reads_the_values_its_host_gives_it():
    """`state` comes from run's parameter: nothing is known of it, so the train step keeps
    pmap's calling contract. What it returns has the batch's leading axis, the device count
    (pmap maps every argument over one size), so the folded caller's mean takes stacked rows."""
    findings = migrate_source(PROGRAM, style="global").findings
    (site,) = [f for f in findings if f.line == 8]  # one finding: the caller's blocker inside
    assert site.code == "PM612" and site.message.endswith("(PM604, line 23)"), site
    mean = [f for f in findings if f.line == 13]
    assert [f.code for f in mean] == ["PM600"] and 'out_specs P("x")' in mean[0].message


@pytest.mark.parametrize("rebuild, global_", [
    ("dict(state, w=cross_replica_mean(state['w']))", True),
    ("state.replace(w=cross_replica_mean(state.w))", True),
    ("state._replace(w=cross_replica_mean(state.w))", True),
    ("dataclasses.replace(state, w=cross_replica_mean(state.w))", True),
    # a plain value in the rebuilt tree: not every leaf has the device axis
    ("dict(state, w=cross_replica_mean(state['w']), step=0)", False),
    ("state.replace(w=cross_replica_mean(state.w), step=0)", False),
])
@pytest.mark.parametrize("batch, stacked", [
    ("np.random.RandomState(i).normal(size=(n, 2))", True),  # per-device results: rows
    ("np.ones((n, 2))", False),  # the same rows on every device: replicated results
])
def test_a_tree_rebuilt_from_values_of_one_layout_has_it(rebuild, global_, batch, stacked):
    source = given_state(PROGRAM, rebuild.encode()).replace(
        b"np.random.RandomState(i).normal(size=(n, 2))", batch.encode())
    source = source.replace(b"import functools\n", b"import dataclasses\nimport functools\n")
    findings = migrate_source(source, style="global").findings
    train, mean = ([f for f in findings if f.line == line and f.code == "PM600"]
                   for line in (9, 14))
    assert bool(train and mean) is global_, [f"{f.line} {f.code} {f.message}" for f in findings]
    if global_:
        assert ('out_specs P("x")' in mean[0].message) is stacked
