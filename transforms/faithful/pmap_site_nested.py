"""Nested pmap sites: `pmap(pmap(f, 'j'), 'i')` and stacked pmap decorators -> one 2-D helper.

Part of the PmapToShardMap rule (transforms/faithful/pmap_sites.py): it pairs the two levels
while visiting; this module rewrites a pair into one `_nested_pmap_shard_map` over a 2-D mesh
(the specs come from transforms/faithful/nested_pmap.py), or refuses both levels with a reason.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.nested_pmap import (
    DEFAULT_NAMES,
    Level,
    NestedRefused,
    check_levels,
    level_arguments,
    nested_specs,
)
from transforms.faithful.pmap_hazards import site_claimed
from transforms.faithful.pmap_site_rewrite import repeatable
from transforms.helpers.nested_pmap_helper import NESTED_HELPER_NAME
from transforms.imports import add_import
from transforms.reading.snippets import shorten


class NestedSites:
    """PmapToShardMap's rewrite of nested and stacked sites (a mixin: it uses the rule's state)."""

    def _rewrite_nested_call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """pmap(pmap(f, 'j'), 'i') (either level possibly a partial) -> one 2-D helper call."""
        inner_call = self._pairs[original]
        if site_claimed(self, original, nested=True):
            return updated
        fun = self._fun_argument(self._pmap_arguments(inner_call))
        fun_text = f"({shorten(self._code(fun), 40)})" if fun is not None else ""
        label = f"{self._code(self._pmap_head(original))}({self._code(self._pmap_head(inner_call))}{fun_text})"
        try:
            if inner_call in self._pairs:
                raise NestedRefused(Code.NESTED_PMAP, "pmap nested three or more levels deep")
            if inner_call in self._maps_pmap:
                raise NestedRefused(Code.NESTED_PMAP, "the inner function holds another pmap")
            outer = Level(original, level_arguments(self._pmap_arguments(original)))
            inner = Level(inner_call, level_arguments(self._pmap_arguments(inner_call)))
            args, summary = self._nested_arguments(outer, inner)
        except NestedRefused as refused:
            self._refuse_pair(original, inner_call, label, refused)
            return updated
        if not self._migrated(original, label, summary, nested=True):
            return updated
        self._needs_nested = True
        return cst.Call(func=cst.Name(self._helper_name(NESTED_HELPER_NAME)), args=args)

    def _pmap_head(self, call: cst.Call) -> cst.BaseExpression:
        """What names pmap in an application: `jax.pmap` or `functools.partial(jax.pmap, ...)`."""
        return call.func.args[0].value if self._is_pmap_partial(call.func) else call.func

    def _refuse_pair(self, outer: cst.CSTNode, inner: cst.CSTNode, label: str, refused) -> None:
        self._report(outer, refused.code, f"{label}: nested pmap, {refused.message}; not migrated")
        line = self._position(outer)[0]
        self._report(
            inner, Code.NESTED_PMAP, f"pmap inside the nested pmap of line {line}, which is not migrated"
        )

    def _nested_arguments(self, outer: Level, inner: Level) -> tuple[list[cst.Arg], str]:
        """The 2-D helper's arguments: f, (outer axis, inner axis), specs, outer's extras."""
        check_levels(outer, inner)
        fun = inner.args.get("fun")
        if fun is None:
            raise NestedRefused(Code.NO_CALLEE, "the inner pmap is called without a function")
        names = tuple(
            cst.parse_expression(default) if _is_none(level.args.get("axis_name"))
            else level.args["axis_name"]
            for level, default in zip((outer, inner), DEFAULT_NAMES)
        )
        for name in names:
            if not repeatable(name):
                raise NestedRefused(
                    Code.AXIS_NAME_EXPRESSION, f"axis_name={self._code(name)} would be evaluated once per spec"
                )
        if self._code_fresh(names[0]) == self._code_fresh(names[1]):
            raise NestedRefused(Code.NESTED_PMAP,
                                f"both levels name the axis {self._code(names[0])}")
        in_specs, out_specs = nested_specs(outer, inner, names, self._spec_func)
        self._uses_spec = True
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        no_space = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        names_tuple = cst.Tuple(
            elements=[cst.Element(names[0].deep_clone(), comma=comma), cst.Element(names[1].deep_clone())]
        )
        args = [cst.Arg(fun, comma=comma), cst.Arg(names_tuple, comma=comma)]
        extras = [("in_specs", in_specs), ("out_specs", out_specs)] + [
            (k, outer.args[k]) for k in ("donate_argnums", "backend") if k in outer.args
        ]
        for keyword, value in extras:
            args.append(cst.Arg(value, keyword=cst.Name(keyword), equal=no_space, comma=comma))
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        summary = (
            f"2-D mesh {self._code_fresh(names_tuple)}, "
            f"in_specs={self._code_fresh(in_specs)}, out_specs={self._code_fresh(out_specs)}"
        )
        return args, summary

    def _rewrite_stacked(
        self, original: cst.FunctionDef, updated: cst.FunctionDef, stacked: list[cst.Decorator]
    ) -> cst.FunctionDef:
        """@partial(pmap, axis_name='i') over @partial(pmap, axis_name='j') -> one decorator."""
        labels = [f"@{self._code(d.decorator)}" for d in stacked]
        label = " over ".join(shorten(text, 30) for text in labels)
        try:
            if len(stacked) > 2:
                raise NestedRefused(Code.NESTED_PMAP, "pmap nested three or more levels deep")
            position = list(original.decorators).index(stacked[0])
            if original.decorators[position + 1] is not stacked[1]:
                raise NestedRefused(Code.NESTED_PMAP,
                                    "another decorator stands between the two pmaps")
            if original in self._maps_pmap or any(d in self._maps_pmap for d in stacked):
                raise NestedRefused(Code.NESTED_PMAP, "the function holds another pmap as well")
            levels = [
                Level(d, level_arguments(list(d.decorator.args[1:])))
                if isinstance(d.decorator, cst.Call) else Level(d, {})
                for d in stacked
            ]
            for level in levels:
                if "fun" in level.args:
                    raise NestedRefused(Code.NESTED_PMAP,
                                        "a pmap decorator names the function itself")
            levels[1].args["fun"] = cst.Name(original.name.value)
            args, summary = self._nested_arguments(*levels)
        except NestedRefused as refused:
            self._refuse_pair(stacked[0], stacked[1], label, refused)
            return updated
        if not self._migrated(stacked[0], "stacked pmap decorators", summary, nested=True):
            return updated
        self._needs_nested = True
        partial_func = next(
            (d.decorator.func for d in stacked if isinstance(d.decorator, cst.Call)), None
        )
        if partial_func is None:
            add_import(self.context, "functools")
            partial_func = cst.parse_expression("functools.partial")
        args[0] = args[0].with_changes(value=cst.Name(self._helper_name(NESTED_HELPER_NAME)))
        args[1] = args[1].with_changes(
            keyword=cst.Name("axis_names"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        new_decorator = stacked[0].with_changes(
            decorator=cst.Call(func=partial_func.deep_clone(), args=args),
            leading_lines=[*stacked[0].leading_lines, *stacked[1].leading_lines],
        )
        decorators = list(updated.decorators)
        decorators[position: position + 2] = [new_decorator]
        return updated.with_changes(decorators=decorators)


def _is_none(node: cst.BaseExpression | None) -> bool:
    return node is None or (isinstance(node, cst.Name) and node.value == "None")

