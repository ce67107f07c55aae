"""pmap's options as data: the one reader of `in_axes`, `out_axes`, `donate_argnums` and
`static_broadcasted_argnums` that both styles use.

`read_axes` turns an in_axes / out_axes expression into a tree of ints and None in tuples,
lists and dicts (`AxesDict`). A part that is not such a literal stays in the tree as an
`Unreadable` carrying the finding code that says why: PM201 a negative axis, PM203 not a
literal (a name, a call, `*x`, a bool), PM209 a leaf that is no axis (a string, a float). Each
style then decides what it can take from the same tree: the faithful rule writes specs for any
literal tree and sends a non-literal one to `_pmap_compat`, the global style takes trees of 0
and None, the contract form 0 or None. `literal_argnums` reads the argnums options the same
way for both global forms (the faithful helper checks them when it runs, as pmap does).

It reads `ast`; the faithful rule, which works on libcst, hands it an option's source text
(`read_axes_text`).
"""

from __future__ import annotations

import ast
import dataclasses
from transforms.codes import Code

NEGATIVE_AXIS = Code.NEGATIVE_AXIS
LIST_IN_AXES = Code.LIST_IN_AXES
NOT_LITERAL = Code.NON_LITERAL_AXES
NOT_AN_AXIS = Code.BAD_AXIS_LEAF


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A part of an in_axes / out_axes tree that is not an axis, and why (`code`)."""

    code: str
    message: str


@dataclasses.dataclass(frozen=True)
class DictKey:
    """An AxesDict key: its source text, and its value when it is a literal."""

    text: str
    literal: bool
    value: object = None


@dataclasses.dataclass(frozen=True)
class AxesDict:
    """A dict of axes, in source order: (key, axes) pairs; a `**x` entry is (None, Unreadable)."""

    items: tuple[tuple[DictKey | None, object], ...]


def read_axes_text(code: str, what: str):
    """`read_axes` of an option written as `code` (the faithful rule's libcst source)."""
    text = f"({code})"
    return read_axes(ast.parse(text, mode="eval").body, what, text)


def read_axes(node: ast.expr, what: str, source: str | None = None):
    """in_axes / out_axes `node` as data: int, None, tuple, list, AxesDict or Unreadable.
    `source` is the text `node` was parsed from (for the messages; else ast.unparse)."""
    def text(part: ast.AST) -> str:
        segment = ast.get_source_segment(source, part) if source is not None else None
        return segment if segment is not None else ast.unparse(part)

    def read(part: ast.expr):
        if isinstance(part, ast.Constant):
            if part.value is None or type(part.value) is int:
                return part.value
            if isinstance(part.value, (str, bytes, float)):
                return _not_an_axis(what, text(part))
            return _not_literal(what, text(part))  # a bool, a complex number, `...`
        if isinstance(part, ast.JoinedStr):
            return _not_an_axis(what, text(part))
        if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.USub):
            return Unreadable(NEGATIVE_AXIS, f"{what} has the negative axis -{text(part.operand)}; "
                              "pmap never supported it")
        if isinstance(part, (ast.Tuple, ast.List)):
            kind = tuple if isinstance(part, ast.Tuple) else list
            return kind(_unpacks(what) if isinstance(e, ast.Starred) else read(e)
                        for e in part.elts)
        if isinstance(part, ast.Dict):
            return AxesDict(tuple((None, _unpacks(what)) if key is None
                                  else (_key(key, text(key)), read(value))
                                  for key, value in zip(part.keys, part.values)))
        return _not_literal(what, text(part))

    return read(node)


def first_problem(axes, what: str) -> Unreadable | None:
    """The first thing in source order that stops pmap's tree from being read, as the faithful
    rule reports it: a top-level list in_axes (pmap raises on it), then any Unreadable."""
    if isinstance(axes, list) and what == "in_axes":
        return Unreadable(LIST_IN_AXES, "in_axes is a list; pmap needs a tuple and raises")
    return next(problems(axes), None)


def problems(axes):
    """Every Unreadable in the tree, in source order."""
    if isinstance(axes, Unreadable):
        yield axes
    elif isinstance(axes, (tuple, list)):
        for child in axes:
            yield from problems(child)
    elif isinstance(axes, AxesDict):
        for _, child in axes.items:
            yield from problems(child)


def is_axis(axes) -> bool:
    """A leaf: a non-negative int or None."""
    return axes is None or type(axes) is int


def string_keyed(axes) -> dict | None:
    """An AxesDict as {str: axes}, when every key is a distinct string literal; else None."""
    if not isinstance(axes, AxesDict) or any(
            key is None or not key.literal or not isinstance(key.value, str)
            for key, _ in axes.items):
        return None
    found = {key.value: child for key, child in axes.items}
    return found if len(found) == len(axes.items) else None


def literal_argnums(node: ast.expr | None) -> tuple[int, ...] | None:
    """donate_argnums / static_broadcasted_argnums written as an int or a tuple or list of
    ints; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def _key(key: ast.expr, text: str) -> DictKey:
    try:
        return DictKey(text, True, ast.literal_eval(key))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return DictKey(text, False)


def _not_an_axis(what: str, text: str) -> Unreadable:
    return Unreadable(NOT_AN_AXIS, f"{what} has the leaf {text}, which is neither a "
                      "non-negative int nor None")


def _not_literal(what: str, text: str) -> Unreadable:
    return Unreadable(NOT_LITERAL, f"{what}={text} is not a literal, so its specs cannot be "
                      "derived here")


def _unpacks(what: str) -> Unreadable:
    return Unreadable(NOT_LITERAL, f"{what} unpacks another container (*x / **x)")
