"""The 1-D pmap site rewrite: pmap's arguments become the helper's, in the same order and layout.

Part of the PmapToShardMap rule (transforms/faithful/pmap_sites.py), which finds the sites and
calls `_rewrite_site` on each plain one: `jax.pmap(f, ...)` or `functools.partial(jax.pmap, ...)`.
`in_axes` / `out_axes` literals become PartitionSpecs (transforms/faithful/specs.py); arguments
only known at run time send the site to `_pmap_compat` instead; the rest is refused with a reason.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.multiprocess import migration_note
from transforms.faithful.pmap_hazards import site_claimed
from transforms.faithful.specs import AxesNotTranslatable, axes_to_specs
from transforms.helpers.helper_features import site_features
from transforms.helpers.pmap_compat_helper import COMPAT_HELPER_NAME
from transforms.helpers.runtime_helper import HELPER_NAME
from transforms.reading.snippets import shorten

DEFAULT_AXIS_NAME = '"_pmap_axis"'  # the helper's default; used when pmap had no axis_name

# pmap's keyword arguments and the helper's name for each (None: same name).
KNOWN_KEYWORDS = {
    "axis_name": None,
    "in_axes": "in_specs",
    "out_axes": "out_specs",
    "static_broadcasted_argnums": "static_argnums",
    "donate_argnums": None,
    "devices": None,
    "backend": None,
    "axis_size": None,
}


class SiteRefused(Exception):
    """The site is left as it is, reported with `code` and the reason."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class UseCompat(Exception):
    """The site's arguments are only known at run time: rewrite it to the drop-in."""


class SiteRewrite:
    """PmapToShardMap's rewrite of one plain site (a mixin: it uses the rule's state)."""

    def _rewrite_site(self, original: cst.Call, updated: cst.Call, *, partial: bool) -> cst.Call:
        if site_claimed(self, original):  # a rewritten host barrier
            return updated
        pmap_args = list(original.args[1:] if partial else original.args)
        label = self._code(original.args[0].value if partial else original.func)
        callee = [a for a in pmap_args if not a.keyword and not a.star]
        if callee and not partial:
            label += f"({shorten(self._code(callee[0].value), 40)})"
        try:
            self._refuse_nested(original, pmap_args, partial)
            new_args, summary = self._translate_args(pmap_args, partial=partial)
        except (SiteRefused, AxesNotTranslatable) as refused:
            self._report(original, refused.code, f"{label}: {refused.message}; not migrated")
            return updated
        except UseCompat as why:
            return self._rewrite_to_compat(original, updated, label, str(why), partial=partial)
        if not self._migrated(original, label, summary):
            return updated
        self._needs_plain = True
        keywords = {a.keyword.value for a in pmap_args if a.keyword}
        self._helper_features |= site_features(keywords, original, self._parent)
        helper = cst.Name(self._helper_name(HELPER_NAME))
        if partial:
            helper_arg = updated.args[0].with_changes(value=helper)
            return updated.with_changes(args=[helper_arg, *new_args])
        return updated.with_changes(func=helper, args=new_args)

    def _rewrite_to_compat(
        self, original: cst.Call, updated: cst.Call, label: str, why: str, *, partial: bool
    ) -> cst.Call:
        """Same arguments, pmap's vocabulary: only the function called changes."""
        message = (
            f"{label} -> _pmap_compat, specs made when it runs ({why}){migration_note(self)}"
        )
        if not self._report(original, Code.PMAP_MIGRATED, message):
            return updated
        self.migrated_sites += 1
        self._needs_compat = True
        helper = cst.Name(self._helper_name(COMPAT_HELPER_NAME))
        if partial:
            helper_arg = updated.args[0].with_changes(value=helper)
            return updated.with_changes(args=[helper_arg, *updated.args[1:]])
        return updated.with_changes(func=helper)

    def _refuse_nested(self, call: cst.Call, pmap_args: list[cst.Arg], partial: bool) -> None:
        positional = [a for a in pmap_args if not a.keyword and not a.star]
        if call in self._nested:
            raise SiteRefused(
                Code.NESTED_PMAP, "pmap inside the function of another pmap, not directly pmap(pmap(f))"
            )
        if call in self._maps_pmap or self._parent(call) in self._maps_pmap:
            raise SiteRefused(
                Code.NESTED_PMAP, "the function holds another pmap (not a direct pmap of a pmap)"
            )
        callee = positional[0].value if positional else None
        binding = (
            self._bindings.lookup(callee.value, self._scope) if isinstance(callee, cst.Name) else None
        )
        if binding is not None and binding.in_loop:
            raise SiteRefused(
                Code.NESTED_PMAP, f"pmap of `{callee.value}`, which this loop rebinds to a pmap on line "
                f"{self._position(binding.statement)[0]}: from the second iteration on it is a "
                "nested pmap; pmap it once, before the loop, or migrate by hand",
            )
        if binding is not None:
            raise SiteRefused(
                Code.NESTED_PMAP, f"pmap of `{callee.value}`, itself pmapped on line "
                f"{self._position(binding.statement)[0]}: nested pmap needs one 2-D mesh; write "
                "both pmaps in one expression (pmap(pmap(f))) to have it migrated, or migrate "
                "by hand",
            )
        if not partial and not positional and not any(
            a.keyword and a.keyword.value == "fun" for a in pmap_args
        ) and not any(a.star for a in pmap_args):
            raise SiteRefused(Code.NO_CALLEE, "pmap is called without a function")

    def _translate_args(
        self, args: list[cst.Arg], *, partial: bool
    ) -> tuple[list[cst.Arg], str]:
        """pmap's arguments -> the helper's, in the same order and layout."""
        if any(a.star for a in args):
            raise UseCompat("*args / **kwargs are forwarded into pmap")
        positional = [a for a in args if not a.keyword]
        if len(positional) > 2:
            raise SiteRefused(Code.UNKNOWN_PMAP_ARGUMENT,
                              "pmap takes at most two positional arguments (fun, axis_name)")
        by_keyword = {a.keyword.value: a for a in args if a.keyword}
        unknown = sorted(set(by_keyword) - set(KNOWN_KEYWORDS) - {"fun"})
        if unknown:
            raise SiteRefused(Code.UNKNOWN_PMAP_ARGUMENT,
                              f"unknown pmap argument {', '.join(unknown)}")
        for keyword in ("in_axes", "out_axes"):
            if keyword in by_keyword:
                try:
                    axes_to_specs(
                        by_keyword[keyword].value, spec_func=cst.Name("P"),
                        axis_name=cst.Name("a"), what=keyword,
                    )
                except AxesNotTranslatable as refused:
                    if refused.code != Code.NON_LITERAL_AXES:
                        raise
                    text = shorten(self._code(by_keyword[keyword].value), 40)
                    raise UseCompat(f"{keyword}={text} is not a literal") from None
        axis_arg = positional[1] if len(positional) == 2 else by_keyword.get("axis_name")
        axis_name = axis_arg.value if axis_arg else cst.parse_expression(DEFAULT_AXIS_NAME)
        uses_axes = "in_axes" in by_keyword or "out_axes" in by_keyword
        if uses_axes and not repeatable(axis_name):
            raise SiteRefused(
                Code.AXIS_NAME_EXPRESSION, f"axis_name={self._code(axis_name)} would be evaluated once per spec"
            )
        if uses_axes and axis_arg is None:
            # The specs name the helper's default axis, so say it at the site too.
            axis_arg = cst.Arg(
                keyword=cst.Name("axis_name"),
                value=axis_name,
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            )
            insert_at = 1 if positional and not partial else 0
            args = args[:insert_at] + [axis_arg] + args[insert_at:]
            if insert_at and args[0].comma == cst.MaybeSentinel.DEFAULT:
                args[0] = args[0].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )

        new_args, summary = [], []
        for arg in args:
            keyword = arg.keyword.value if arg.keyword else None
            if keyword in ("in_axes", "out_axes"):
                specs = axes_to_specs(
                    arg.value, spec_func=self._spec_func, axis_name=axis_name, what=keyword
                )
                self._uses_spec = True
                new_name = KNOWN_KEYWORDS[keyword]
                arg = arg.with_changes(keyword=cst.Name(new_name), value=specs)
                summary.append(f"{new_name}={self._code_fresh(specs)}")
            elif KNOWN_KEYWORDS.get(keyword):
                arg = arg.with_changes(keyword=cst.Name(KNOWN_KEYWORDS[keyword]))
            new_args.append(arg)
        return new_args, ", ".join(summary)


def repeatable(node: cst.BaseExpression) -> bool:
    """Literals, names and dotted names can be written in every spec without changing meaning."""
    if isinstance(node, (cst.SimpleString, cst.Integer, cst.Name)):
        return True
    if isinstance(node, cst.ConcatenatedString):
        return repeatable(node.left) and repeatable(node.right)
    if isinstance(node, cst.Attribute):
        return repeatable(node.value)
    return False

