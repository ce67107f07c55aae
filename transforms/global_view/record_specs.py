"""in_specs and out_specs per field of a record (a dataclass, NamedTuple or flax struct) whose
fields differ in layout: every field replicated but some that hold one row per device
(`replicate(state).replace(dropout_rng=shard_prng_key(rng))`).

The rule: such a record goes into shard_map with a spec of its own shape, P() on every leaf
and P(axis) on the per-device fields, written with the program's own rebuild call
(`jax.tree.map(lambda _: P(), state).replace(dropout_rng=P("batch"))`). The spec needs the
record's tree, so it is built from the argument inside the step's jitted def, and a record
the body gives back in that layout leaves with the same spec object. The per-device fields
keep pmap's stacked layout, as a stacked argument does (argument_specs.py): each device gets
its (1, ...) block, the body's first statement squeezes those fields, and its returns expand
them again, so the body sees what pmap's body saw.

This module holds the texts; records.py decides when a record qualifies, replication.py
proves what the body returns, site_edits.py places the texts."""

from __future__ import annotations

import ast
import dataclasses

# An in_specs entry for a record: the marker, the rebuild form and the per-device fields.
RECORD_SPEC = "\x00record\x00"
RECORD_OUT = "record@"  # a result mode: the record parameter whose spec the result leaves with


@dataclasses.dataclass(frozen=True)
class RecordResult:
    """A body result that is the record parameter `base` rebuilt, with `fields` (at most the
    ones per-device on entry) per-device and the others replicated."""
    base: str
    fields: frozenset


def record_spec(form: str, fields) -> str:
    """The in_specs text of a record whose `fields` are per-device (`form`: `replace`,
    `_replace`, or the text of `dataclasses.replace` as the module names it)."""
    return f"{RECORD_SPEC}{form}\x00{','.join(sorted(fields))}"


def parse_record_spec(spec: str) -> tuple[str, tuple[str, ...]] | None:
    """(form, fields) of a record's in_specs text; None for any other spec."""
    if not spec.startswith(RECORD_SPEC):
        return None
    form, fields = spec[len(RECORD_SPEC):].split("\x00")
    return form, tuple(fields.split(","))


def spec_words(specs, out_specs: str, params, axis_text: str) -> tuple[list[str], str]:
    """The in_specs and out_specs of a finding with each record's spec in words: `state: P()
    but dropout_rng=P("batch")`, and `state's specs` for a record given back."""
    words = []
    for param, spec in zip(params, specs):
        parsed = parse_record_spec(spec)
        words.append(spec if parsed is None else f"{param}: P() but " + " ".join(
            f"{field}=P({axis_text})" for field in parsed[1]))
    for param in params:
        out_specs = out_specs.replace(RECORD_SPEC + param, f"{param}'s specs")
    return words, out_specs


def rebuilt(form: str, record: str, updates: dict[str, str]) -> str:
    """`record` with fields replaced, written with the program's own rebuild call."""
    keywords = ", ".join(f"{field}={value}" for field, value in updates.items())
    if form in ("replace", "_replace"):
        return f"{record}.{form}({keywords})"
    return f"{form}({record}, {keywords})"


def spec_name(param: str, taken: set[str]) -> str:
    """The local name of a record parameter's spec inside the step's def."""
    name = f"{param}_spec"
    while name in taken:
        name = f"_{name}"
    return name


def spec_line(name: str, param: str, form: str, fields, jax: str, axis_text: str) -> str:
    """`state_spec = jax.tree.map(lambda _: P(), state).replace(dropout_rng=P("batch"))`: P() on
    every leaf (a field that is a tree gets P() on each of its leaves), P(axis) on the fields
    that hold one row per device (a prefix of their trees)."""
    every = f"{jax}.tree.map(lambda _: P(), {param})"
    return f"{name} = " + rebuilt(form, every, {f: f"P({axis_text})" for f in fields})


def squeezed(param: str, form: str, fields, jax: str, numpy: str) -> str:
    """The body's first statement: the per-device fields lose the size-1 block axis shard_map
    gives them, so the body sees one device's row as under pmap."""
    return f"{param} = " + rebuilt(form, param, {
        f: f"{jax}.tree.map(lambda y: {numpy}.squeeze(y, 0), {param}.{f})" for f in fields})


def expanded_field(value: str, jax: str, numpy: str) -> str:
    return f"{jax}.tree.map(lambda y: {numpy}.expand_dims(y, 0), {value})"


def returned_record_edits(node: ast.AST, form: str, fields, source_of, jax: str,
                          numpy: str) -> dict | None:
    """The edits that give a returned record its per-device fields' device axis back: a name
    is rebuilt with them expanded; a rebuild call (`state.replace(key=k, ...)`) that sets every
    such field gets its values expanded. None for any other expression (not edited)."""
    if isinstance(node, ast.Name):
        return {node: rebuilt(form, node.id, {
            f: expanded_field(f"{node.id}.{f}", jax, numpy) for f in fields})}
    rebuild = isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr in ("replace", "_replace")
        and not node.args or len(node.args) == 1 and ast.unparse(node.func) == form)
    if rebuild:
        given = {k.arg: k.value for k in node.keywords}
        if None in given or not set(fields) <= set(given):
            return None
        return {given[f]: expanded_field(source_of(given[f]), jax, numpy) for f in fields}
    return None
