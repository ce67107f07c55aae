"""`--style global` and donation: a value pmap donated a copy of must not be read after the call
(transforms/global_view/donation.py, PM610). Each case is one run() body; the line a fallback
must name ends in `# read`. Pure: the migration only (the real runs are in
test_generated_equivalence.py, DONATED_STACKS)."""

from __future__ import annotations

import textwrap

import pytest

from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

MODULE = '''\
import functools

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 3


def keep(box, value):
    box.append(value)


def summarize(params, batch):
    """Stores neither argument in the other."""
    return jnp.sum(batch) * 2.0


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x):
    shift = jax.lax.pmean(jnp.mean(x), "batch")
    total = jax.lax.pmean(jnp.sum(x), "batch")
    return jax.tree_util.tree_map(lambda p: p - 0.5 * shift, params), total


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
{body}
'''

# Bodies that stay global: nothing reads a value pmap donated a copy of, or only a loop's
# overwritten is_deleted() flag does.
GLOBAL = {
    # A module function that stores neither argument in the other: the batch it is given
    # with the state is not held by the state the next step donates.
    "helper_keeps_nothing": """
        params = {"w": jnp.stack([jnp.ones(3)] * n)}
        totals = []
        for _ in range(3):
            batch = jnp.asarray(x) * 2.0
            params, loss = train_step(params, batch)
            totals.append(float(summarize(params, batch)))
            first = float(jnp.sum(batch))
        return {"totals": np.asarray(totals), "first": np.asarray(first),
                "w": np.asarray(params["w"][0])}
    """,
    # What the donated state cannot hold: a loop counter over range, keys split from one key,
    # draws from a numpy generator, the device count, a step handed to a helper.
    "numbers_and_keys_hold_nothing": """
        rng = np.random.RandomState(0)
        key = jax.random.PRNGKey(0)
        key, sub = jax.random.split(key)
        params = jnp.stack([jax.random.normal(sub, (3,))] * jax.local_device_count())
        log = []
        for t in range(3):
            batch = rng.normal(size=(n, 2, 3)).astype(np.float32)
            keep(log, (t, key))
            params, loss = train_step(params, batch)
            keep(log, (t, float(loss[0])))
        return {"t": np.asarray(t), "key": np.asarray(key), "w": np.asarray(params[0])}
    """,
    "overwritten_in_constant_loop": """
        params = {"w": jnp.stack([jnp.ones(3)] * n)}
        deleted = False
        for _ in range(5):
            old = params
            params, loss = train_step(params, x)
            deleted = old["w"].is_deleted()
        return {"deleted": np.asarray(deleted), "w": np.asarray(params["w"][0])}
    """,
    "module_constant_trip_count": """
        params = jnp.stack([jnp.ones(3)] * n)
        for t in range(STEPS):
            old = params
            params, loss = train_step(params, x)
            deleted = np.asarray(old.is_deleted())
        return {"deleted": deleted, "w": np.asarray(params[0])}
    """,
    "two_trips_tuple_unpacking": """
        params = jnp.stack([jnp.ones(3)] * n)
        for _ in range(2):
            old, batch = params, x
            params, loss = train_step(params, batch)
            deleted = bool(old.is_deleted())
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "replicated_placement_read_after": """
        params = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
        old = params
        params, loss = train_step(params, x)
        return {"deleted": np.asarray(old.is_deleted()), "w": np.asarray(params[0])}
    """,
    "step_result_read_after": """
        params, _ = train_step(jnp.stack([jnp.ones(3)] * n), x)
        old = params
        params, loss = train_step(params, x)
        return {"deleted": np.asarray(old.is_deleted()), "w": np.asarray(params[0])}
    """,
    "numpy_stack_read_after": """
        w = np.ones((3,), np.float32)
        params = np.broadcast_to(w, (n,) + w.shape)
        old = params
        params, loss = train_step(params, x)
        return {"old": np.asarray(old[0]), "w": np.asarray(params[0])}
    """,
    "stacked_value_read_after": """
        w = jnp.ones((3,), jnp.float32)
        params, loss = train_step(jnp.stack([w] * n), x)
        return {"w": np.asarray(w), "params": np.asarray(params[0])}
    """,
    "read_before_the_call": """
        params = jnp.stack([jnp.ones(3)] * n)
        before = np.asarray(params[0])
        params, loss = train_step(params, x)
        return {"before": before, "w": np.asarray(params[0])}
    """,
}

# Bodies that must fall back with PM610 naming the `# read` line.
FALLBACK = {
    "straight_line_is_deleted": """
        params = jnp.stack([np.ones((3,), np.float32)] * n)
        old = params
        params, loss = train_step(params, x)
        return {"deleted": np.asarray(old.is_deleted()), "w": np.asarray(params[0])}  # read
    """,
    "one_iteration": """
        params = jnp.stack([jnp.ones(3)] * n)
        for _ in range(1):
            old = params
            params, loss = train_step(params, x)
            deleted = old.is_deleted()  # read
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "trip_count_unknown": """
        params = jnp.stack([jnp.ones(3)] * n)
        for _ in range(n):
            old = params
            params, loss = train_step(params, x)
            deleted = old.is_deleted()  # read
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "loop_may_break": """
        params = jnp.stack([jnp.ones(3)] * n)
        for _ in range(5):
            old = params
            params, loss = train_step(params, x)
            deleted = old.is_deleted()  # read
            if float(loss[0]) > 100.0:
                break
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "flag_read_in_the_loop": """
        params = jnp.stack([jnp.ones(3)] * n)
        flags = []
        for _ in range(5):
            old = params
            params, loss = train_step(params, x)
            deleted = old.is_deleted()  # read
            flags.append(deleted)
        return {"flags": np.asarray(flags), "w": np.asarray(params[0])}
    """,
    "read_under_an_if": """
        params = jnp.stack([jnp.ones(3)] * n)
        deleted = False
        for t in range(5):
            old = params
            params, loss = train_step(params, x)
            if t < 4:
                deleted = old.is_deleted()  # read
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "stack_built_every_iteration": """
        w = jnp.ones(3)
        for _ in range(5):
            params = jnp.stack([w] * n)
            params_in = params
            params, loss = train_step(params, x)
            deleted = params_in.is_deleted()  # read
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    "value_read_in_a_constant_loop": """
        params = {"w": jnp.stack([jnp.ones(3)] * n)}
        for _ in range(5):
            old = params
            params, loss = train_step(params, x)
            first = np.asarray(old["w"][0])  # read
        return {"first": first, "w": np.asarray(params["w"][0])}
    """,
    "donated_again": """
        params = jnp.stack([jnp.ones(3)] * n)
        losses = []
        for _ in range(3):
            new, loss = train_step(params, x)  # read
            losses.append(float(loss[0]))
        return {"losses": np.asarray(losses), "w": np.asarray(new[0])}
    """,
    "alias_in_a_tuple": """
        params = jnp.stack([jnp.ones(3)] * n)
        pair = (params, 1.0)
        params, loss = train_step(params, x)
        return {"deleted": np.asarray(pair[0].is_deleted()), "w": np.asarray(params[0])}  # read
    """,
    "constant_fill_state": """
        params = jnp.zeros((n, 3))
        old = params
        params, loss = train_step(params, x)
        return {"deleted": np.asarray(old.is_deleted()), "w": np.asarray(params[0])}  # read
    """,
    "loop_inside_try": """
        params = jnp.stack([jnp.ones(3)] * n)
        deleted = False
        try:
            for _ in range(5):
                old = params
                params, loss = train_step(params, x)
                deleted = old.is_deleted()  # read
        except ValueError:
            pass
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
    # Donated inside a comprehension, read after it: the deletion reaches the names outside.
    "donated_in_a_comprehension_read_after": """
        params = jnp.stack([jnp.ones(3)] * n)
        results = [train_step(p, x) for p in [params]]
        return {"w": np.asarray(params[0]), "r": np.asarray(results[0][1])}  # read
    """,
    "donated_again_in_a_comprehension": """
        params = jnp.stack([jnp.ones(3)] * n)
        results = [train_step(params, x) for _ in range(2)]  # read
        return {"w": np.asarray(results[1][0][0])}
    """,
    # A name bound by a loop over range holds numbers only while nothing else binds it.
    "loop_counter_rebound_to_the_state": """
        params = jnp.stack([jnp.ones(3)] * n)
        for t in range(3):
            t = params
            params, loss = train_step(params, x)
        return {"t": np.asarray(t[0]), "w": np.asarray(params[0])}  # read
    """,
    # A helper may store what it is given in another of its arguments (`keep(box, params)`).
    "kept_by_a_helper": """
        params = jnp.stack([jnp.ones(3)] * n)
        box = []
        keep(box, params)
        params, loss = train_step(params, x)
        return {"kept": np.asarray(len(box)), "w": np.asarray(params[0])}  # read
    """,
    # Keys split from one key are new arrays; a key passed along with the state is not.
    "split_pair_one_donated": """
        key = jax.random.PRNGKey(0)
        key, sub = jax.random.split(key)
        params = jnp.stack([jax.random.normal(sub, (3,))] * n)
        old = params
        params, loss = train_step(params, x)
        return {"old": np.asarray(old[0]), "w": np.asarray(params[0])}  # read
    """,
    "while_loop": """
        params = jnp.stack([jnp.ones(3)] * n)
        t = 0
        while t < 5:
            old = params
            params, loss = train_step(params, x)
            deleted = old.is_deleted()  # read
            t += 1
        return {"deleted": np.asarray(deleted), "w": np.asarray(params[0])}
    """,
}


def _module(body: str) -> str:
    return MODULE.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), "    "))


def _migrate(body: str):
    source = _module(body)
    result = migrate_source(source.encode(), style="global")
    return source, result


@pytest.mark.parametrize("name", sorted(GLOBAL))
def test_stays_global(name):
    _, result = _migrate(GLOBAL[name])
    codes = [f.code for f in result.findings]
    assert "PM600" in codes and "PM610" not in codes, [f.to_text() for f in result.findings]
    assert "_pmap_style_shard_map" not in result.source.decode()


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_falls_back_naming_the_read(name):
    source, result = _migrate(FALLBACK[name])
    codes = [f.code for f in result.findings]
    assert "PM600" not in codes, [f.to_text() for f in result.findings]
    read_line = next(i for i, line in enumerate(source.splitlines(), 1) if line.endswith("# read"))
    # The site's one finding (PM612) names the read: its blocker's code and line.
    donated = [f for f in with_named_blockers(result.findings) if f.code == "PM610"]
    assert [f.line for f in donated] == [read_line], [f.to_text() for f in result.findings]


@pytest.mark.parametrize("trips", [0, 1, 2, 3, 7])
def test_trip_count_boundary(trips):
    """The overwritten flag is allowed exactly when the loop runs at least twice."""
    body = GLOBAL["overwritten_in_constant_loop"].replace("range(5)", f"range({trips})")
    _, result = _migrate(body)
    codes = [f.code for f in with_named_blockers(result.findings)]
    if trips >= 2:
        assert "PM600" in codes and "PM610" not in codes
    else:
        assert "PM610" in codes and "PM600" not in codes


def test_message_names_value_and_donating_call():
    source, result = _migrate(FALLBACK["straight_line_is_deleted"])
    lines = source.splitlines()
    produced = next(i for i, line in enumerate(lines, 1) if "jnp.stack" in line)
    donated = next(i for i, line in enumerate(lines, 1) if "= train_step(" in line)
    message = next(f.message for f in with_named_blockers(result.findings) if f.code == "PM610")
    assert f"`jnp.stack([np.ones((3,), np.float32)] * n)` (line {produced})" in message
    assert f"`train_step` donates at line {donated}" in message
    assert "`is_deleted()` gives True where the original gives False" in message


def test_no_donation_no_check():
    """Without donate_argnums nothing is deleted: the straight-line read stays global."""
    source = _module(FALLBACK["straight_line_is_deleted"]).replace(", donate_argnums=(0,)", "")
    result = migrate_source(source.encode(), style="global")
    assert "PM600" in [f.code for f in result.findings]
