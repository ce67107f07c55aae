"""Nested pmap `pmap(pmap(f, 'j', in_axes=Ij), 'i', in_axes=Ii)` -> specs over a 2-D mesh (R10).

Both levels see the same arguments, so their in_axes literals are combined leaf by leaf: the
outer axis ki indexes the original array, the inner kj indexes it after the outer squeeze, so
'j' sits at kj + (kj >= ki) (verified on jax 0.4.38 against the `_nested_pmap_shard_map`
helper for ki, kj in {None, 0, 1, 2}). Outputs: the inner level stacks its axis at 0, the
outer puts its own at ko, so 'j' ends at 0 + (0 >= ko). Inner out_axes other than 0 never
worked in legacy pmap (it fails to lower or raises), so there is nothing to keep and those
sites are reported, as is everything not verified: static arguments, devices=, axis_size=,
donation or a backend on the inner level.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from transforms.codes import Code
from transforms.reading.pmap_options import NOT_LITERAL, AxesDict, first_problem, read_axes_text
from transforms.reading.snippets import source as _code


class NestedRefused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# What each level may carry; everything else is refused with the reason.
OUTER_KEYWORDS = {"fun", "axis_name", "in_axes", "out_axes", "donate_argnums", "backend"}
INNER_KEYWORDS = {"fun", "axis_name", "in_axes", "out_axes"}
PMAP_KEYWORDS = {
    "fun", "axis_name", "in_axes", "out_axes", "static_broadcasted_argnums", "donate_argnums",
    "devices", "backend", "axis_size",
}
DEFAULT_NAMES = ('"_pmap_axis"', '"_pmap_inner_axis"')  # when a level has no axis_name


@dataclasses.dataclass
class Level:
    """One pmap level: its arguments by pmap's parameter names (fun and axis_name included)."""

    node: cst.CSTNode  # what findings point at
    args: dict[str, cst.BaseExpression]


def level_arguments(args: list[cst.Arg]) -> dict[str, cst.BaseExpression]:
    """pmap's arguments by name; positional ones are (fun, axis_name) as in pmap's signature."""
    if any(a.star for a in args):
        raise NestedRefused(Code.FORWARDED_ARGUMENTS,
                            "*args / **kwargs are forwarded into a nested pmap")
    positional = [a.value for a in args if not a.keyword]
    if len(positional) > 2:
        raise NestedRefused(Code.UNKNOWN_PMAP_ARGUMENT,
                            "pmap takes at most two positional arguments (fun, axis_name)")
    named = dict(zip(("fun", "axis_name"), positional))
    for arg in args:
        if arg.keyword:
            if arg.keyword.value in named:
                raise NestedRefused(Code.UNKNOWN_PMAP_ARGUMENT,
                                    f"pmap got {arg.keyword.value} twice")
            named[arg.keyword.value] = arg.value
    unknown = sorted(set(named) - PMAP_KEYWORDS)
    if unknown:
        raise NestedRefused(Code.UNKNOWN_PMAP_ARGUMENT,
                            f"unknown pmap argument {', '.join(unknown)}")
    return named


def check_levels(outer: Level, inner: Level) -> None:
    """Refuse what the 2-D translation does not cover (see the module docstring)."""
    for level, allowed, which in ((outer, OUTER_KEYWORDS, "outer"), (inner, INNER_KEYWORDS, "inner")):
        extra = sorted(set(level.args) - allowed)
        if extra:
            raise NestedRefused(
                Code.NESTED_PMAP, f"{', '.join(extra)} on the {which} pmap of a nested pmap is not translated"
            )
    inner_out = inner.args.get("out_axes")
    if inner_out is not None and not (isinstance(inner_out, cst.Integer) and int(inner_out.value, 0) == 0):
        raise NestedRefused(
            Code.NESTED_PMAP,
            "the inner pmap has out_axes other than 0, which legacy pmap itself cannot run",
        )


def _literal(node: cst.BaseExpression | None, what: str, level: str):
    """A literal in_axes/out_axes as Python data (ints, None, tuples, lists, dicts keyed by the
    key's source text, holding the key's node), as transforms/reading/pmap_options.py reads it;
    refused with its codes and reasons."""
    if node is None:
        return 0
    axes = read_axes_text(_code(node), what)
    refused = first_problem(axes, what)
    if refused is not None and refused.code == NOT_LITERAL:
        raise NestedRefused(Code.NESTED_PMAP, f"{what} of the {level} pmap is not a literal")
    if refused is not None:
        raise NestedRefused(refused.code, f"{level} pmap: {refused.message}")
    return _to_data(axes)


def _to_data(axes):
    if isinstance(axes, AxesDict):
        return {key.text: (cst.parse_expression(key.text), _to_data(child))
                for key, child in axes.items}
    if isinstance(axes, (tuple, list)):
        return type(axes)(_to_data(child) for child in axes)
    return axes


class _Positions(dict):
    """A spec leaf: {position in the array: level (0 outer, 1 inner)}."""


def _combine(outer, inner, leaf):
    """Broadcast two prefix trees against each other, calling leaf(outer_leaf, inner_leaf)."""
    outer_leaf = outer is None or isinstance(outer, int)
    inner_leaf = inner is None or isinstance(inner, int)
    if outer_leaf and inner_leaf:
        return leaf(outer, inner)
    if outer_leaf or inner_leaf:
        tree = inner if outer_leaf else outer
        return _map(tree, lambda sub: _combine(outer, sub, leaf) if outer_leaf else _combine(sub, inner, leaf))
    if type(outer) is not type(inner):
        raise NestedRefused(Code.NESTED_PMAP, "the two levels' in_axes have different structures")
    if isinstance(outer, dict):
        if outer.keys() != inner.keys():
            raise NestedRefused(Code.NESTED_PMAP,
                                "the two levels' in_axes have different dict keys")
        return {k: (outer[k][0], _combine(outer[k][1], inner[k][1], leaf)) for k in outer}
    if len(outer) != len(inner):
        raise NestedRefused(Code.NESTED_PMAP, "the two levels' in_axes have different lengths")
    return type(outer)(_combine(o, i, leaf) for o, i in zip(outer, inner))


def _map(tree, fn):
    if isinstance(tree, dict):
        return {k: (key, fn(sub)) for k, (key, sub) in tree.items()}
    return type(tree)(fn(sub) for sub in tree)


def nested_specs(
    outer: Level, inner: Level, names: tuple[cst.BaseExpression, cst.BaseExpression],
    spec_func: cst.BaseExpression,
) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """(in_specs, out_specs) expressions for the 2-D helper."""
    outer_in = _literal(outer.args.get("in_axes"), "in_axes", "outer")
    inner_in = _literal(inner.args.get("in_axes"), "in_axes", "inner")
    outer_out = _literal(outer.args.get("out_axes"), "out_axes", "outer")

    def in_leaf(ki, kj):
        positions = _Positions() if ki is None else _Positions({ki: 0})
        if kj is not None:
            positions[kj + (ki is not None and kj >= ki)] = 1
        return positions

    def out_leaf(ko, _inner):
        positions = _Positions({0 + (ko is not None and 0 >= ko): 1})
        if ko is not None:
            positions[ko] = 0
        return positions

    in_tree = _combine(outer_in, inner_in, in_leaf)
    out_tree = _combine(outer_out, 0, out_leaf)
    return _to_cst(in_tree, names, spec_func), _to_cst(out_tree, names, spec_func)


def _to_cst(tree, names, spec_func) -> cst.BaseExpression:
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if isinstance(tree, _Positions):
        entries = [
            names[tree[i]].deep_clone() if i in tree else cst.Name("None")
            for i in range(max(tree) + 1 if tree else 0)
        ]
        args = [cst.Arg(value=e, comma=comma) for e in entries[:-1]] + [
            cst.Arg(value=e) for e in entries[-1:]
        ]
        return cst.Call(func=spec_func.deep_clone(), args=args)
    if isinstance(tree, dict):
        elements = [
            cst.DictElement(key=key.deep_clone(), value=_to_cst(sub, names, spec_func), comma=comma)
            for key, sub in tree.values()
        ]
        return cst.Dict(elements=_last_comma(elements))
    elements = [cst.Element(value=_to_cst(sub, names, spec_func), comma=comma) for sub in tree]
    if isinstance(tree, list):
        return cst.List(elements=_last_comma(elements))
    if len(elements) == 1:
        return cst.Tuple(elements=[elements[0].with_changes(comma=cst.Comma())])
    return cst.Tuple(elements=_last_comma(elements))


def _last_comma(elements):
    return elements[:-1] + [e.with_changes(comma=cst.MaybeSentinel.DEFAULT) for e in elements[-1:]]


