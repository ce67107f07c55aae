"""Rewrite every `jax.pmap` site to the `_pmap_style_shard_map` helper (jit + shard_map).

Sites are found by qualified name (`jax.pmap`, `from jax import pmap as pm`, `import jax as j`),
never by text. Each one is a call (`jax.pmap(f, ...)` wherever it stands: assigned, called on
the spot, stored on self, returned, under jit), a bare decorator (`@jax.pmap`) or a partial
(`functools.partial(jax.pmap, ...)`, as a decorator or a value). The rewrite keeps the
arguments and their layout, renaming pmap's words to shard_map's (`in_axes` -> `in_specs`,
`out_axes` -> `out_specs`, `static_broadcasted_argnums` -> `static_argnums`). The body of the
mapped function is never edited. Every site yields a finding; what cannot be proved is left
alone and reported with the reason.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

from transforms.module_helpers import request_helper
from transforms.pmap_hazards import site_claimed
from transforms.runtime_helper import HELPER_MARKER, HELPER_NAME, helper_source
from transforms.specs import AxesNotTranslatable, axes_to_specs
from transforms.reporting import ReportingTransformer
from transforms.suppressions import Suppressions
from transforms.target import TargetJax

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
PARTITION_SPEC_NAMES = {"jax.sharding.PartitionSpec", "jax.P", "jax.sharding.P"}
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
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class PmapToShardMap(ReportingTransformer):
    """One pass over a module: rewrite pmap sites, ask for the helper once, tidy imports."""

    PREFILTER_WORDS = (rb"pmap",)

    def __init__(
        self, context: CodemodContext, target: TargetJax, suppressions: Suppressions | None = None
    ):
        super().__init__(context, target, suppressions)
        self.migrated_lines: list[int] = []
        self._nested: set[cst.CSTNode] = set()  # pmap sites inside another site's function
        self._spec_func: cst.BaseExpression | None = None
        self._uses_spec = False

    # -- helpers -------------------------------------------------------------------------

    def _is_pmap(self, node: cst.CSTNode) -> bool:
        return isinstance(node, (cst.Name, cst.Attribute)) and PMAP in self._qualified(node)

    def _is_pmap_partial(self, node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.Call)
            and PARTIAL in self._qualified(node.func)
            and bool(node.args)
            and not node.args[0].keyword
            and not node.args[0].star
            and self._is_pmap(node.args[0].value)
        )

    def _is_pmap_site(self, node: cst.CSTNode) -> bool:
        """A node that is pmap, a call of it, or a partial of it."""
        if self._is_pmap(node) or self._is_pmap_partial(node):
            return True
        return isinstance(node, cst.Call) and self._is_pmap(node.func)

    def _code(self, node: cst.CSTNode) -> str:
        return self._source_module.code_for_node(node).strip()

    # -- module ---------------------------------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self._source_module = node
        self._spec_func = self._choose_spec_func(node)

    def _choose_spec_func(self, module: cst.Module) -> cst.BaseExpression:
        """`P` when that name is free or already PartitionSpec, else the full dotted name."""
        for name in m.findall(module, m.Name("P")):
            qualified = self._qualified(name)
            if qualified and not qualified & PARTITION_SPEC_NAMES:
                return cst.parse_expression("jax.sharding.PartitionSpec")
        return cst.Name("P")

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.migrated_lines:
            return updated_node
        if self._uses_spec:
            if isinstance(self._spec_func, cst.Name):
                AddImportsVisitor.add_needed_import(
                    self.context, "jax.sharding", "PartitionSpec", asname="P"
                )
            else:
                AddImportsVisitor.add_needed_import(self.context, "jax")
        for alias in m.findall(original_node, m.ImportFrom(module=m.Name("jax"))):
            if isinstance(alias.names, cst.ImportStar):
                continue
            for name in alias.names:
                if isinstance(name.name, cst.Name) and name.name.value == "pmap":
                    asname = name.asname.name.value if name.asname else None
                    RemoveImportsVisitor.remove_unused_import(self.context, "jax", "pmap", asname)
        request_helper(self.context, HELPER_NAME, helper_source(self.target))
        return updated_node

    # -- value uses and removed references --------------------------------------------------

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check_value_use(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._check_value_use(node)

    def _check_value_use(self, node: cst.Name | cst.Attribute) -> None:
        if not self._is_pmap(node):
            return
        parent = self._parent(node)
        if isinstance(parent, (cst.ImportAlias, cst.AsName)):
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            return  # the Call is the site
        if isinstance(parent, cst.Decorator):
            return
        if isinstance(parent, cst.Arg):
            call = self._parent(parent)
            if isinstance(call, cst.Call) and self._is_pmap_partial(call) and call.args[0] is parent:
                return
        self._report(
            node,
            "PM205",
            f"`{self._code(node)}` is used as a value here, so its calls cannot be seen; not migrated",
        )

    # -- sites ----------------------------------------------------------------------------

    def leave_Decorator(
        self, original_node: cst.Decorator, updated_node: cst.Decorator
    ) -> cst.Decorator:
        if not self._is_pmap(original_node.decorator):
            return updated_node
        if site_claimed(self, original_node):  # multi-process module: stays jax.pmap
            return updated_node
        if self._decorated_twice(original_node):
            self._report(original_node, "PM206", f"{self._nesting(original_node)}; not migrated")
            return updated_node
        if not self._migrated(original_node, "@" + self._code(original_node.decorator), ""):
            return updated_node
        return updated_node.with_changes(decorator=cst.Name(HELPER_NAME))

    def _decorated_twice(self, decorator: cst.Decorator) -> bool:
        owner = self._parent(decorator)
        if not isinstance(owner, cst.FunctionDef):
            return False
        return sum(self._is_pmap_site(d.decorator) for d in owner.decorators) > 1

    def visit_Call(self, node: cst.Call) -> None:
        """Mark pmap sites inside the mapped function of this site: nested pmap."""
        if not self._is_pmap_site(node):
            return
        args = node.args[1:] if self._is_pmap_partial(node) else node.args
        positional = [a for a in args if not a.keyword and not a.star]
        if positional:
            inner = m.findall(positional[0].value, m.Call() | m.Name() | m.Attribute())
            self._nested.update(n for n in inner if self._is_pmap_site(n))

    def _nesting(self, decorator: cst.Decorator) -> str:
        """Stacked pmap decorators: the one listed first is the outer pmap."""
        owner = self._parent(decorator)
        pmaps = [d for d in owner.decorators if self._is_pmap_site(d.decorator)]
        if pmaps[0] is decorator:
            return "pmap of a pmapped function"
        return "pmap inside the function of another pmap"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self._is_pmap(original_node.func):
            return self._rewrite_site(original_node, updated_node, partial=False)
        if self._is_pmap_partial(original_node):
            return self._rewrite_site(original_node, updated_node, partial=True)
        return updated_node

    def _rewrite_site(self, original: cst.Call, updated: cst.Call, *, partial: bool) -> cst.Call:
        if site_claimed(self, original):  # a rewritten host barrier, or a multi-process module
            return updated
        pmap_args = list(original.args[1:] if partial else original.args)
        label = self._code(original.args[0].value if partial else original.func)
        callee = [a for a in pmap_args if not a.keyword and not a.star]
        if callee and not partial:
            label += f"({_shorten(self._code(callee[0].value))})"
        try:
            self._refuse_nested(original, pmap_args, partial)
            new_args, summary = self._translate_args(pmap_args, partial=partial)
        except (SiteRefused, AxesNotTranslatable) as refused:
            self._report(original, refused.code, f"{label}: {refused.message}; not migrated")
            return updated
        if not self._migrated(original, label, summary):
            return updated
        if partial:
            helper_arg = updated.args[0].with_changes(value=cst.Name(HELPER_NAME))
            return updated.with_changes(args=[helper_arg, *new_args])
        return updated.with_changes(func=cst.Name(HELPER_NAME), args=new_args)

    def _refuse_nested(self, call: cst.Call, pmap_args: list[cst.Arg], partial: bool) -> None:
        positional = [a for a in pmap_args if not a.keyword and not a.star]
        if call in self._nested:
            raise SiteRefused("PM206", "pmap inside the function of another pmap")
        if positional and any(
            self._is_pmap_site(n)
            for n in m.findall(positional[0].value, m.Name() | m.Attribute() | m.Call())
        ):
            raise SiteRefused("PM206", "pmap of a pmapped function")
        owner = self._parent(call)
        if isinstance(owner, cst.Decorator) and self._decorated_twice(owner):
            raise SiteRefused("PM206", self._nesting(owner))
        if not partial and not positional and not any(
            a.keyword and a.keyword.value == "fun" for a in pmap_args
        ) and not any(a.star for a in pmap_args):
            raise SiteRefused("PM210", "pmap is called without a function")

    def _translate_args(
        self, args: list[cst.Arg], *, partial: bool
    ) -> tuple[list[cst.Arg], str]:
        """pmap's arguments -> the helper's, in the same order and layout."""
        if any(a.star for a in args):
            raise SiteRefused("PM204", "*args / **kwargs are forwarded into pmap")
        positional = [a for a in args if not a.keyword]
        if len(positional) > 2:
            raise SiteRefused("PM207", "pmap takes at most two positional arguments (fun, axis_name)")
        by_keyword = {a.keyword.value: a for a in args if a.keyword}
        unknown = sorted(set(by_keyword) - set(KNOWN_KEYWORDS) - {"fun"})
        if unknown:
            raise SiteRefused("PM207", f"unknown pmap argument {', '.join(unknown)}")
        axis_arg = positional[1] if len(positional) == 2 else by_keyword.get("axis_name")
        axis_name = axis_arg.value if axis_arg else cst.parse_expression(DEFAULT_AXIS_NAME)
        uses_axes = "in_axes" in by_keyword or "out_axes" in by_keyword
        if uses_axes and not _repeatable(axis_name):
            raise SiteRefused(
                "PM208", f"axis_name={self._code(axis_name)} would be evaluated once per spec"
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
            elif keyword in KNOWN_KEYWORDS and KNOWN_KEYWORDS[keyword]:
                arg = arg.with_changes(keyword=cst.Name(KNOWN_KEYWORDS[keyword]))
            new_args.append(arg)
        return new_args, ", ".join(summary)

    def _code_fresh(self, node: cst.CSTNode) -> str:
        return " ".join(cst.Module(body=[]).code_for_node(node).split())

    def _migrated(self, node: cst.CSTNode, label: str, summary: str) -> bool:
        """Report the migration of a site; False when a suppression keeps it as it is."""
        detail = f" ({summary})" if summary else ""
        if not self._report(node, "PM100", f"{label} -> jax.jit + jax.shard_map{detail}"):
            return False
        self.migrated_lines.append(self._position(node)[0])
        return True


def _repeatable(node: cst.BaseExpression) -> bool:
    """Literals, names and dotted names can be written in every spec without changing meaning."""
    if isinstance(node, (cst.SimpleString, cst.Integer, cst.Name)):
        return True
    if isinstance(node, cst.ConcatenatedString):
        return _repeatable(node.left) and _repeatable(node.right)
    if isinstance(node, cst.Attribute):
        return _repeatable(node.value)
    return False


def _shorten(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["PmapToShardMap", "HELPER_MARKER"]
