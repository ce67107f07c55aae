"""Defs nested in a caller (or a helper it follows) and only called there: read at each call
as their body would run there (transforms/global_view/local_functions.py); and the pieces of
an input pipeline they are written with (a deque, `itertools.islice`, `list(x)` of a batch,
a parameter defaulted with `x if p is None else p`). The fixture pairs
producer_prefetch_nested_defs and caller_returns_trained_state run the whole forms."""

from __future__ import annotations

from pathlib import Path

from transforms.global_view.contract_text import CONTRACT_NAMES
from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

_PIPELINE = b'''import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np


@jax.pmap
def step(x):
    return x * 2.0


def shard(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


def source():
    rng = np.random.RandomState(0)
    while True:
        yield rng.normal(size=(8 * jax.local_device_count(), 3)).astype(np.float32)


def ahead(iterator, size, devices=None):
    queue = collections.deque()
    devices = DEVICES

    def fill(count):
        for item in itertools.islice(iterator, count):
            queue.append(jax.device_put_sharded(list(item), devices))

    fill(size)
    while queue:
        yield queue.popleft()
        fill(1)


def run():
    out = []
    for _, x in zip(range(3), ahead(map(shard, source()), 2)):
        out.append(np.asarray(step(x)))
    return np.stack(out)
'''


def _migrate(source: bytes):
    result = migrate_source(source, style="global")
    findings = with_named_blockers(result.findings)
    return result.source.decode(), {f.code for f in findings}, findings


def _global(text: str, codes: set) -> bool:
    return "PM600" in codes and not any(name in text for name in CONTRACT_NAMES)


def test_a_local_def_only_called_is_read_at_its_calls():
    text, codes, _ = _migrate(_PIPELINE.replace(b"DEVICES", b"jax.local_devices()"))
    assert _global(text, codes)
    assert 'queue.append(jax.device_put(item, NamedSharding(_mesh("devices"), P("devices"))))' \
        in text
    assert "x.reshape((-1,) + x.shape[1:])" in text


def test_the_none_default_written_as_a_conditional_expression():
    """`jax.local_devices() if devices is None else devices`, no call passing `devices`: the
    device list, as `devices or jax.local_devices()` is."""
    text, codes, _ = _migrate(_PIPELINE.replace(
        b"DEVICES", b"jax.local_devices() if devices is None else devices"))
    assert _global(text, codes)
    kept = _PIPELINE.replace(b"DEVICES", b"jax.local_devices() if devices is None else devices")
    passed = kept.replace(b"ahead(map(shard, source()), 2)",
                          b"ahead(map(shard, source()), 2, jax.local_devices()[:1])")
    text, codes, _ = _migrate(passed)
    assert "PM600" not in codes  # a device list passed: not known to be every device


def test_a_local_def_passed_on_is_not_followed():
    """A def whose name is read other than in a call (stored, passed) may run anywhere: the
    construct stays unmodelled, and the step keeps pmap's contract."""
    source = _PIPELINE.replace(b"DEVICES", b"jax.local_devices()").replace(
        b"    fill(size)\n", b"    fill(size)\n    keep = [fill]\n")
    text, codes, findings = _migrate(source)
    assert "PM600" not in codes
    assert any("used in a FunctionDef" in f.message for f in findings)


def test_a_local_def_asked_for_two_layouts_is_refused():
    """One def serves every call: given a per-device batch at one call and a plain array at
    another, its rewrite would be right for one only, so the caller falls back."""
    source = b'''import jax
import numpy as np


@jax.pmap
def step(x):
    return x + 1.0


def run():
    n = jax.local_device_count()

    def prepare(x):
        return jax.device_put_sharded(list(x), jax.local_devices())

    batch = np.ones((n * 2, 3), np.float32).reshape(n, 2, 3)
    first = step(prepare(batch))
    plain = np.ones((n, 3), np.float32)
    second = step(prepare(plain))
    return np.asarray(first), np.asarray(second)
'''
    text, codes, findings = _migrate(source)
    assert "PM600" not in codes
    assert "jax.device_put_sharded(list(x), jax.local_devices())" not in text or \
        "_device_put_sharded(list(x)" in text


def test_a_queue_read_for_its_truth_only():
    """`while queue:` reads the number of entries, a host value: allowed for a list of
    per-device values; anything else reading the list is not."""
    source = _PIPELINE.replace(b"DEVICES", b"jax.local_devices()").replace(
        b"    while queue:\n", b"    print(queue)\n    while queue:\n")
    _, codes, _ = _migrate(source)
    assert "PM600" not in codes


def test_a_local_def_asked_for_different_edits_is_refused():
    """`split(rows, n)` is the step's batch (its reshape merged), `split(rows, 2)` plain host
    halves: one rewritten def cannot serve both, so the caller falls back rather than turn
    the halves into one row."""
    source = b'''import jax
import numpy as np


@jax.pmap
def step(x):
    return x + 1.0


def run():
    n = jax.local_device_count()
    rows = np.arange(n * 6, dtype=np.float32)

    def split(x, parts):
        return x.reshape(parts, -1)

    first = step(split(rows, n))
    halves = split(rows, 2)
    return np.asarray(first), halves
'''
    text, codes, findings = _migrate(source)
    assert "PM600" not in codes
    assert "return x.reshape(parts, -1)" in text
    assert any("different layouts" in f.message for f in findings)
    # and each order of the calls
    swapped = source.replace(b"    first = step(split(rows, n))\n    halves = split(rows, 2)\n",
                             b"    halves = split(rows, 2)\n    first = step(split(rows, n))\n")
    text, codes, _ = _migrate(swapped)
    assert "PM600" not in codes and "return x.reshape(parts, -1)" in text


def test_a_local_def_called_from_a_lambda_is_not_followed():
    source = _PIPELINE.replace(b"DEVICES", b"jax.local_devices()").replace(
        b"    fill(size)\n", b"    fill(size)\n    again = lambda: fill(1)\n")
    _, codes, _ = _migrate(source)
    assert "PM600" not in codes


_RETURNS = b'''import jax
import jax.numpy as jnp
import numpy as np


step = jax.pmap(lambda w, x: w + jax.lax.pmean(x, "i"), axis_name="i")


def train(steps):
    n = jax.local_device_count()
    w = jax.device_put_replicated(jnp.zeros(3), jax.local_devices())
    for _ in range(steps):
        w = step(w, np.ones((n, 3), np.float32))
    return w


def run():
    w = train(2)
    READ
'''


def test_a_caller_returning_global_values_is_read_where_they_go():
    """`train` alone returns a global `w` to `run`, which reads pmap's stacked rows: refused.
    Decided again inside `run`, the read `w[0]` becomes the value itself."""
    text, codes, _ = _migrate(_RETURNS.replace(b"READ", b"return {'w': np.asarray(w[0])}"))
    assert _global(text, codes)
    assert "np.asarray(w)" in text


def test_the_function_it_returns_to_may_still_refuse():
    """Where `run` cannot read what `train` returns (here it hands the stack to a function
    the analysis does not follow), `train` is decided again as a caller of its own and refused
    for what it returns, as before; nothing is rewritten for the global layout."""
    text, codes, findings = _migrate(_RETURNS.replace(
        b"READ", b"return {'w': np.asarray(jax.vmap(jnp.sin)(w))}"))
    assert "PM600" not in codes
    assert any("returns values in the global layout to callers in this module" in f.message
               for f in findings)


def test_a_value_of_another_layout_stored_into_a_tree_is_refused():
    """A replicated mean stored into a copy of per-device (stacked) statistics would leave a
    tree of two layouts, which no spec describes: the caller keeps refusing the store."""
    source = (Path(__file__).parent / "data" / "store_into_stacked_tree.py").read_bytes()
    text, codes, findings = _migrate(source)
    assert any("stored into a container" in f.message for f in findings) or \
        any("pmap_mean" in f.message and f.code == "PM604" for f in findings)
    assert 'new_model_state["batch_stats"] = pmap_mean(' in text
