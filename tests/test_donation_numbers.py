"""The donated-read check (PM610) and Python numbers (transforms/global_view/donation_numbers.py):
a Python number is not a device buffer, so it holds no array a step could donate, and arithmetic
on numbers gives a number. A value that may be an array keeps its tokens. Pure: the migration
only."""

from __future__ import annotations

import ast

from transforms.global_view.donation_numbers import is_number, number_names
from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

# A donated record whose static schedule closes over the int batch size; the data loader is
# given the same int, so before the rule the state and the batch "may hold" one value.
PROGRAM = """import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "key"],
                   meta_fields=["schedule"])
@dataclasses.dataclass(frozen=True)
class State:
    w: Any
    key: Any
    schedule: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    def replicate(self):
        return replicate(self).replace(key=jax.random.split(self.key, jax.local_device_count()))


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def shard(xs):
    local_device_count = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((local_device_count, -1) + x.shape[1:]), xs)


def replicate(tree):
    return jax.device_put_replicated(tree, jax.local_devices())


def make_schedule(batch_size, warmup):
    def schedule(step):
        return 0.1 * jnp.minimum(1.0, step / warmup) / batch_size
    return schedule


def loader(data, batch_size):
    for start in range(0, len(data), batch_size):
        yield data[start:start + batch_size]


def main(per_device_batch=2, warmup=2):
    n = jax.local_device_count()
    batch_size = per_device_batch * n
    schedule = make_schedule(batch_size, warmup)
    state = State(w=jnp.ones(3), key=jax.random.PRNGKey(0), schedule=schedule)

    def train_step(state, x):
        key, new_key = jax.random.split(state.key)
        noise = jax.random.normal(key, x.shape[-1:]) * 0.01
        g = jax.lax.pmean(jnp.mean(x, 0) + noise, "batch")
        return state.replace(w=state.w - state.schedule(2) * g, key=new_key), g

    p_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    state = state.replicate()
    data = np.arange(3 * batch_size * 3, dtype=np.float32).reshape(3 * batch_size, 3)
    batches = loader(data, batch_size)
    losses = []
    for _ in range(3):
        batch = shard(next(batches))
        state, g = p_step(state, batch)
        losses.append(float(unreplicate(g).mean()))
    return {"w": np.asarray(jax.device_get(unreplicate(state.w))), "losses": np.asarray(losses)}


def run():
    return main()
"""


def _migrate(source: str):
    result = migrate_source(source.encode(), style="global")
    return result, [f for f in with_named_blockers(result.findings)]


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _donation_lines(findings) -> list[int]:
    """The lines the PM610 blockers name: as findings of their own, or in the record site's
    PM612 ("its specs per field fail (PM610, line N)")."""
    lines = [f.line for f in findings if f.code == "PM610"]
    for f in findings:
        if f.code == "PM612" and "(PM610, line " in f.message:
            lines.append(int(f.message.split("(PM610, line ")[1].split(")")[0]))
    return lines


def test_int_batch_size_shared_by_state_and_batch_goes_global():
    result, findings = _migrate(PROGRAM)
    codes = [f.code for f in findings]
    assert "PM600" in codes and "PM610" not in codes, [f.to_text() for f in findings]
    assert "_per_device_shard_map" not in result.source.decode()


def test_parameter_a_call_passes_an_array_keeps_the_check():
    """`per_device_batch` is an array here: the batch size made from it may be one too."""
    source = PROGRAM.replace("return main()", "return main(per_device_batch=jnp.asarray(2))")
    _, findings = _migrate(source)
    assert "PM600" not in [f.code for f in findings]
    assert _donation_lines(findings) == [_line(source, "state, g = p_step(state, batch)")], \
        [f.to_text() for f in findings]


def test_array_made_from_a_number_is_an_array():
    """`scale` is made from the int, but it is a device array the donated state holds."""
    source = PROGRAM.replace(
        "    state = State(w=jnp.ones(3),",
        "    scale = jnp.asarray(batch_size, jnp.float32)\n"
        "    state = State(w=jnp.ones(3) * scale,").replace(
        "        losses.append(float(unreplicate(g).mean()))",
        "        losses.append(float(unreplicate(g).mean()) * float(scale))  # read")
    _, findings = _migrate(source)
    assert "PM600" not in [f.code for f in findings]
    assert _donation_lines(findings) == [_line(source, "# read")], [f.to_text() for f in findings]


def _numbers(source: str, parameters=frozenset(), constants=None):
    function = ast.parse(source).body[0]
    builtin = lambda f: f.id if isinstance(f, ast.Name) else None  # noqa: E731
    qualify = lambda f: ast.unparse(f).replace("jnp.", "jax.numpy.")  # noqa: E731
    return number_names(function, frozenset(parameters), set(), constants or {}, builtin, qualify)


def test_number_names():
    names, _ = _numbers("""
def f(k, m=2, x=None):
    n = 0
    for i in range(k):
        n = n + i * m
    size = len(x) // max(n, 1)
    flag = not x
    a = 2 * x
    b = 1
    b = x.shape[0]
    c = round(x)
    d = jax.device_count() * SCALE
    e = jax.device_count() * ARRAY
    def inner():
        only_inner = 3
""", parameters={"m"}, constants={"SCALE": 4, "ARRAY": "text"})
    assert names == {"n", "i", "m", "size", "flag", "d"}


def test_is_number_reads_operands():
    names, local = _numbers("def f(n):\n    k = n\n", parameters={"n"})
    check = lambda text: is_number(ast.parse(text, mode="eval").body, names, local, {},  # noqa
                                   lambda f: None, lambda f: "")
    assert check("k * 2 + n ** 2 - (k if k > 1 else 3)")
    assert not check("k * y") and not check("k @ k") and not check("only_global")


# Epochs of a number of steps the analysis cannot count: the inner loop may run no trip.
EPOCHS = (
    "    for epoch in range(2):\n"
    "        batches = loader(data, batch_size)\n"
    "        for _ in range(len(data) // batch_size):\n"
    "            batch = shard(next(batches))\n"
    "            state, g = p_step(state, batch)\n"
    "            losses.append(float(unreplicate(g).mean()))\n")
STEPS = (
    "    for _ in range(3):\n"
    "        batch = shard(next(batches))\n"
    "        state, g = p_step(state, batch)\n"
    "        losses.append(float(unreplicate(g).mean()))\n")


def test_loop_that_may_run_no_trip_deletes_nothing_on_that_path():
    """On the path where the inner loop ran no trip, no step ran, so `state` still holds the
    value `state.replicate()` made, live; on the other path it holds the step's results. The
    next epoch reads neither deleted (a step deletes what the names held when it ran)."""
    source = PROGRAM.replace(STEPS, EPOCHS)
    result, findings = _migrate(source)
    codes = [f.code for f in findings]
    assert "PM600" in codes and "PM610" not in codes, [f.to_text() for f in findings]


def test_value_held_when_the_step_ran_stays_deleted_after_the_loop():
    """`initial` held the replicated state when the first step deleted it: read after the
    loop (which may have run), it is a deleted value."""
    source = PROGRAM.replace(STEPS, EPOCHS).replace(
        "    state = state.replicate()\n",
        "    state = state.replicate()\n    initial = state\n").replace(
        "    return {\"w\":", "    first = float(unreplicate(initial.w).sum())  # read\n"
        "    return {\"first\": first, \"w\":")
    _, findings = _migrate(source)
    assert "PM600" not in [f.code for f in findings]
    assert _donation_lines(findings) == [_line(source, "# read")], [f.to_text() for f in findings]
