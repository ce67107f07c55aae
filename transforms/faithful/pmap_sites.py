"""Rewrite every `jax.pmap` site to the `_pmap_style_shard_map` helper (jit + shard_map).

Sites are found by qualified name (`jax.pmap`, `from jax import pmap as pm`, `import jax as j`),
never by text. Each one is a call (`jax.pmap(f, ...)` wherever it stands: assigned, called on
the spot, stored on self, returned, under jit), a bare decorator (`@jax.pmap`) or a partial
(`functools.partial(jax.pmap, ...)`, as a decorator or a value). The rewrite keeps the
arguments and their layout, renaming pmap's words to shard_map's (`in_axes` -> `in_specs`,
`out_axes` -> `out_specs`, `static_broadcasted_argnums` -> `static_argnums`). The body of the
mapped function is never edited. Every site yields a finding; what cannot be proved is left
alone and reported with the reason.

Three forms go elsewhere:
- nested pmap (`pmap(pmap(f, 'j'), 'i')`, stacked pmap decorators, partials of either) becomes
  one `_nested_pmap_shard_map` over a 2-D mesh (transforms/faithful/nested_pmap.py);
- sites whose arguments are only known at run time (forwarded *args / **kwargs, in_axes in a
  variable) become `_pmap_compat(...)`, a drop-in with pmap's signature
  (transforms/helpers/pmap_compat_helper.py), with the arguments untouched;
- `jax.pmap` used as a value whose every use is a call becomes `_pmap_compat` too
  (transforms/faithful/pmap_values.py).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

from transforms.faithful.multiprocess import migration_note, pmap_helper_source
from transforms.faithful.nested_pmap import (
    DEFAULT_NAMES,
    Level,
    NestedRefused,
    check_levels,
    level_arguments,
    nested_specs,
)
from transforms.faithful.pmap_hazards import site_claimed
from transforms.faithful.pmap_values import NameUses, ReplaceByIdentity, ValueUse, classify, refusal
from transforms.faithful.specs import AxesNotTranslatable, axes_to_specs
from transforms.helpers.nested_pmap_helper import NESTED_HELPER_NAME, nested_helper_source
from transforms.helpers.pmap_compat_helper import COMPAT_HELPER_NAME, compat_helper_source
from transforms.helpers.runtime_helper import HELPER_MARKER, HELPER_NAME
from transforms.module_helpers import request_helper
from transforms.reading.pmap_bindings import PmappedNames
from transforms.reading.snippets import one_line, shorten
from transforms.reporting import ReportingTransformer
from transforms.suppressions import Suppressions
from transforms.target import TargetJax

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
PARTITION_SPEC_NAMES = {"jax.sharding.PartitionSpec", "jax.P", "jax.sharding.P"}
PMAP_LIKE_HELPERS = {HELPER_NAME, COMPAT_HELPER_NAME, NESTED_HELPER_NAME}
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


class UseCompat(Exception):
    """The site's arguments are only known at run time: rewrite it to the drop-in."""


class PmapToShardMap(ReportingTransformer):
    """One pass over a module: rewrite pmap sites, ask for the helpers once, tidy imports."""

    PREFILTER_WORDS = (rb"pmap",)

    def __init__(
        self, context: CodemodContext, target: TargetJax, suppressions: Suppressions | None = None
    ):
        super().__init__(context, target, suppressions)
        self.migrated_sites = 0
        self._nested: set[cst.CSTNode] = set()  # pmap sites inside another site's function
        self._maps_pmap: set[cst.CSTNode] = set()  # sites whose function holds another pmap
        self._pairs: dict[cst.Call, cst.Call] = {}  # pmap(pmap(f)): outer call -> inner call
        self._skip: set[cst.CSTNode] = set()  # parts of a nested site, handled by its outer
        self._stacked: set[cst.CSTNode] = set()  # stacked pmap decorators and their partials
        self._defs: tuple[cst.FunctionDef, ...] = ()  # enclosing functions, innermost last
        self._scope: tuple[cst.FunctionDef | cst.ClassDef, ...] = ()  # and classes, for names
        self._bindings: PmappedNames | None = None  # names holding a pmapped function
        self._values: list[ValueUse] = []
        self._value_nodes: set[cst.CSTNode] = set()
        self._names: NameUses | None = None
        self._spec_func: cst.BaseExpression | None = None
        self._uses_spec = False
        self._needs_compat = False
        self._needs_plain = False  # the 1-D helper (nested-only modules do without it)
        self._needs_nested = False

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

    def _pmap_arguments(self, node: cst.CSTNode) -> list[cst.Arg] | None:
        """pmap's arguments when `node` applies pmap to a function: `pmap(f, ...)` or
        `partial(pmap, ...)(f, ...)`; None for anything else."""
        if not isinstance(node, cst.Call):
            return None
        if self._is_pmap(node.func):
            return list(node.args)
        if self._is_pmap_partial(node.func):
            return [*node.func.args[1:], *node.args]
        return None

    def _code(self, node: cst.CSTNode) -> str:
        return self._source_module.code_for_node(node).strip()

    # -- module ---------------------------------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self._source_module = node
        self._spec_func = self._choose_spec_func(node)
        self._names = NameUses(self._parent)
        self._bindings = PmappedNames(node, self._parent, self._maps_like_pmap)

    def _choose_spec_func(self, module: cst.Module) -> cst.BaseExpression:
        """`P` when that name is free or already PartitionSpec, else the full dotted name."""
        if self.facts is not None and not self.facts.imports.needs_scope_analysis:
            # The import table knows every binding of P without walking the module.
            meanings = [self.facts.imports.qualified(cst.Name("P"), None)]
        else:
            meanings = [self._qualified(name) for name in m.findall(module, m.Name("P"))]
        if any(q and not q & PARTITION_SPEC_NAMES for q in meanings):
            return cst.parse_expression("jax.sharding.PartitionSpec")
        return cst.Name("P")

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        updated_node = self._migrate_values(updated_node)
        if not self.migrated_sites:
            return updated_node
        if self._uses_spec:
            if isinstance(self._spec_func, cst.Name):
                AddImportsVisitor.add_needed_import(
                    self.context, "jax.sharding", "PartitionSpec", asname="P"
                )
            else:
                AddImportsVisitor.add_needed_import(self.context, "jax")
        for asname in self._pmap_from_imports(original_node):
            RemoveImportsVisitor.remove_unused_import(self.context, "jax", "pmap", asname)
        if self._needs_plain or self._needs_compat:
            request_helper(self.context, HELPER_NAME, pmap_helper_source(self))
        if self._needs_compat:
            request_helper(self.context, COMPAT_HELPER_NAME, compat_helper_source())
        if self._needs_nested:
            request_helper(self.context, NESTED_HELPER_NAME, nested_helper_source(self.target))
        return updated_node

    def _pmap_from_imports(self, module: cst.Module) -> list[str | None]:
        """The `as` names (None: none) of every `from jax import pmap [as x]`."""
        if self.facts is not None and not self.facts.imports.needs_scope_analysis:
            imported = self.facts.imports.imported
            return [None if local == "pmap" else local
                    for local, name in imported.items() if name == PMAP]
        found = []
        for statement in m.findall(module, m.ImportFrom(module=m.Name("jax"))):
            if isinstance(statement.names, cst.ImportStar):
                continue
            for alias in statement.names:
                if isinstance(alias.name, cst.Name) and alias.name.value == "pmap":
                    found.append(alias.asname.name.value if alias.asname else None)
        return found

    # -- value uses and removed references --------------------------------------------------

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if isinstance(self._parent(node), cst.Module):
            self._names.module_defs.setdefault(node.name.value, []).append(node)
        pmaps = [d for d in node.decorators if self._is_pmap_site(d.decorator)]
        self._defs = (*self._defs, node)
        self._scope = (*self._scope, node)
        if len(pmaps) > 1:
            self._stacked.update(pmaps)
            self._stacked.update(d.decorator for d in pmaps)
        if pmaps:
            inner = [n for n in m.findall(node.body, m.Call() | m.Name() | m.Attribute())
                     if self._is_pmap_site(n)]
            if inner:
                self._nested.update(inner)
                self._maps_pmap.update(pmaps)

    # Bindings count from the end of their statement: `f = jax.pmap(f)` reads the old `f`.

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        for target in original_node.targets:
            if isinstance(target.target, cst.Name):
                self._bindings.bind(
                    target.target.value, self._scope, original_node, original_node.value
                )
        return updated_node

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign):
        if isinstance(original_node.target, cst.Name) and original_node.value is not None:
            self._bindings.bind(
                original_node.target.value, self._scope, original_node, original_node.value
            )
        return updated_node

    def leave_AugAssign(self, original_node: cst.AugAssign, updated_node: cst.AugAssign):
        if isinstance(original_node.target, cst.Name):
            self._bindings.bind(original_node.target.value, self._scope, original_node, original_node)
        return updated_node

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._scope = (*self._scope, node)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef):
        self._scope = self._scope[:-1]
        self._bindings.bind(original_node.name.value, self._scope, original_node, None)
        return updated_node

    def visit_For(self, node: cst.For) -> None:
        self._bindings.enter_loop(node, self._scope)

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        self._bindings.leave_loop()
        return updated_node

    def visit_While(self, node: cst.While) -> None:
        self._bindings.enter_loop(node, self._scope)

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        self._bindings.leave_loop()
        return updated_node

    def _maps_like_pmap(self, node: cst.CSTNode) -> bool:
        """pmap, or a helper a migrated site calls in its place (so that a second run sees
        `pmap(inner)` over a migrated `inner` exactly as the first run did)."""
        if self._is_pmap_site(node):
            return True
        if isinstance(node, cst.Call) and PARTIAL in self._qualified(node.func) and node.args:
            node = node.args[0].value
        return isinstance(node, cst.Name) and node.value in PMAP_LIKE_HELPERS

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check_value_use(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._names.note(node, self._defs)
        self._check_value_use(node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute):
        return self._keep_value_node(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return self._keep_value_node(original_node, updated_node)

    def _keep_value_node(self, original, updated):
        """A pmap value stays the very input node, so leave_Module can find and replace it."""
        if original in self._value_nodes:
            return original
        return updated

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
        scope = self._defs[-1] if self._defs else None
        self._values.append(classify(node, scope, self._parent, self._code))
        self._value_nodes.add(node)

    def _migrate_values(self, module: cst.Module) -> cst.Module:
        """pmap values whose every use is a call -> `_pmap_compat`; the others are reported."""
        replacements = {}
        for use in self._values:
            label = f"`{self._code(use.node)}`"
            if site_claimed(self, use.node):
                continue
            reason = refusal(use, self._names, lambda node: self._position(node)[0])
            if reason:
                self._report(
                    use.node, "PM205",
                    f"{label} is used as a value and {reason.removeprefix('is ')}; not migrated "
                    "(the _pmap_compat drop-in replaces it only when every use is a call)",
                )
                continue
            how = f"bound to `{use.name}`" if use.name else f"passed to `{use.callee}`"
            if self._report(
                use.node, "PM100",
                f"{label} used as a value ({how}, every use a call) -> _pmap_compat, "
                f"pmap's signature on jax.jit + jax.shard_map{migration_note(self)}",
            ):
                self.migrated_sites += 1
                self._needs_compat = True
                replacements[id(use.node)] = cst.Name(COMPAT_HELPER_NAME).with_changes(
                    lpar=use.node.lpar, rpar=use.node.rpar
                )
        return module.visit(ReplaceByIdentity(replacements)) if replacements else module

    # -- sites ----------------------------------------------------------------------------

    def leave_Decorator(
        self, original_node: cst.Decorator, updated_node: cst.Decorator
    ) -> cst.Decorator:
        if not self._is_pmap(original_node.decorator):
            return updated_node
        if site_claimed(self, original_node):  # a rewritten host barrier
            return updated_node
        if original_node in self._stacked:
            return updated_node  # leave_FunctionDef rewrites the stack
        if original_node.decorator in self._nested:
            self._report(
                original_node, "PM206",
                f"@{self._code(original_node.decorator)}: pmap inside the function of another "
                "pmap, not directly pmap(pmap(f)); not migrated",
            )
            return updated_node
        if original_node in self._maps_pmap:
            self._report(
                original_node, "PM206",
                f"@{self._code(original_node.decorator)}: the function holds another pmap "
                "(not a direct pmap of a pmap); not migrated",
            )
            return updated_node
        if not self._migrated(original_node, "@" + self._code(original_node.decorator), ""):
            return updated_node
        self._needs_plain = True
        return updated_node.with_changes(decorator=cst.Name(HELPER_NAME))

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        self._defs = self._defs[:-1]
        self._scope = self._scope[:-1]
        self._bindings.bind(original_node.name.value, self._scope, original_node, None)
        stacked = [d for d in original_node.decorators if d in self._stacked]
        if not stacked or site_claimed(self, stacked[0], nested=True):
            return updated_node
        return self._rewrite_stacked(original_node, updated_node, stacked)

    def visit_Call(self, node: cst.Call) -> None:
        """Pair pmap(pmap(f)); mark pmap sites held deeper in a site's function."""
        if not self._is_pmap_site(node) and self._pmap_arguments(node) is None:
            return
        args = self._pmap_arguments(node)
        if args is None:  # a partial of pmap, not applied here
            args = node.args[1:] if self._is_pmap_partial(node) else node.args
        fun = self._fun_argument(args)
        if fun is None:
            return
        if self._pmap_arguments(fun) is not None and not self._is_pmap_partial(node):
            self._pairs[node] = fun
            self._skip.update((fun, fun.func) if self._is_pmap_partial(fun.func) else (fun,))
            if self._is_pmap_partial(node.func):
                self._skip.add(node.func)
            return
        inner = m.findall(fun, m.Call() | m.Name() | m.Attribute())
        inner = [n for n in inner if self._is_pmap_site(n)]
        if inner:
            self._nested.update(inner)
            self._maps_pmap.add(node)

    @staticmethod
    def _fun_argument(args: list[cst.Arg]) -> cst.BaseExpression | None:
        positional = [a for a in args if not a.keyword and not a.star]
        if positional:
            return positional[0].value
        return next((a.value for a in args if a.keyword and a.keyword.value == "fun"), None)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if original_node in self._skip or original_node in self._stacked:
            return updated_node
        if original_node in self._pairs:
            return self._rewrite_nested_call(original_node, updated_node)
        if self._is_pmap(original_node.func):
            return self._rewrite_site(original_node, updated_node, partial=False)
        if self._is_pmap_partial(original_node):
            return self._rewrite_site(original_node, updated_node, partial=True)
        return updated_node

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
        if partial:
            helper_arg = updated.args[0].with_changes(value=cst.Name(HELPER_NAME))
            return updated.with_changes(args=[helper_arg, *new_args])
        return updated.with_changes(func=cst.Name(HELPER_NAME), args=new_args)

    def _rewrite_to_compat(
        self, original: cst.Call, updated: cst.Call, label: str, why: str, *, partial: bool
    ) -> cst.Call:
        """Same arguments, pmap's vocabulary: only the function called changes."""
        message = (
            f"{label} -> _pmap_compat, pmap's signature on jax.jit + jax.shard_map ({why}, "
            f"so in_axes / out_axes become specs when it runs){migration_note(self)}"
        )
        if not self._report(original, "PM100", message):
            return updated
        self.migrated_sites += 1
        self._needs_compat = True
        if partial:
            helper_arg = updated.args[0].with_changes(value=cst.Name(COMPAT_HELPER_NAME))
            return updated.with_changes(args=[helper_arg, *updated.args[1:]])
        return updated.with_changes(func=cst.Name(COMPAT_HELPER_NAME))

    def _refuse_nested(self, call: cst.Call, pmap_args: list[cst.Arg], partial: bool) -> None:
        positional = [a for a in pmap_args if not a.keyword and not a.star]
        if call in self._nested:
            raise SiteRefused(
                "PM206", "pmap inside the function of another pmap, not directly pmap(pmap(f))"
            )
        if call in self._maps_pmap or self._parent(call) in self._maps_pmap:
            raise SiteRefused(
                "PM206", "the function holds another pmap (not a direct pmap of a pmap)"
            )
        callee = positional[0].value if positional else None
        binding = (
            self._bindings.lookup(callee.value, self._scope) if isinstance(callee, cst.Name) else None
        )
        if binding is not None and binding.in_loop:
            raise SiteRefused(
                "PM206", f"pmap of `{callee.value}`, which this loop rebinds to a pmap on line "
                f"{self._position(binding.statement)[0]}: from the second iteration on it is a "
                "nested pmap; pmap it once, before the loop, or migrate by hand",
            )
        if binding is not None:
            raise SiteRefused(
                "PM206", f"pmap of `{callee.value}`, itself pmapped on line "
                f"{self._position(binding.statement)[0]}: nested pmap needs one 2-D mesh; write "
                "both pmaps in one expression (pmap(pmap(f))) to have it migrated, or migrate "
                "by hand",
            )
        if not partial and not positional and not any(
            a.keyword and a.keyword.value == "fun" for a in pmap_args
        ) and not any(a.star for a in pmap_args):
            raise SiteRefused("PM210", "pmap is called without a function")

    def _translate_args(
        self, args: list[cst.Arg], *, partial: bool
    ) -> tuple[list[cst.Arg], str]:
        """pmap's arguments -> the helper's, in the same order and layout."""
        if any(a.star for a in args):
            raise UseCompat("*args / **kwargs are forwarded into pmap")
        positional = [a for a in args if not a.keyword]
        if len(positional) > 2:
            raise SiteRefused("PM207", "pmap takes at most two positional arguments (fun, axis_name)")
        by_keyword = {a.keyword.value: a for a in args if a.keyword}
        unknown = sorted(set(by_keyword) - set(KNOWN_KEYWORDS) - {"fun"})
        if unknown:
            raise SiteRefused("PM207", f"unknown pmap argument {', '.join(unknown)}")
        for keyword in ("in_axes", "out_axes"):
            if keyword in by_keyword:
                try:
                    axes_to_specs(
                        by_keyword[keyword].value, spec_func=cst.Name("P"),
                        axis_name=cst.Name("a"), what=keyword,
                    )
                except AxesNotTranslatable as refused:
                    if refused.code != "PM203":
                        raise
                    text = shorten(self._code(by_keyword[keyword].value), 40)
                    raise UseCompat(f"{keyword}={text} is not a literal") from None
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
            elif KNOWN_KEYWORDS.get(keyword):
                arg = arg.with_changes(keyword=cst.Name(KNOWN_KEYWORDS[keyword]))
            new_args.append(arg)
        return new_args, ", ".join(summary)

    # -- nested pmap ------------------------------------------------------------------------

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
                raise NestedRefused("PM206", "pmap nested three or more levels deep")
            if inner_call in self._maps_pmap:
                raise NestedRefused("PM206", "the inner function holds another pmap")
            outer = Level(original, level_arguments(self._pmap_arguments(original)))
            inner = Level(inner_call, level_arguments(self._pmap_arguments(inner_call)))
            args, summary = self._nested_arguments(outer, inner)
        except NestedRefused as refused:
            self._refuse_pair(original, inner_call, label, refused)
            return updated
        if not self._migrated(original, label, summary):
            return updated
        self._needs_nested = True
        return cst.Call(func=cst.Name(NESTED_HELPER_NAME), args=args)

    def _pmap_head(self, call: cst.Call) -> cst.BaseExpression:
        """What names pmap in an application: `jax.pmap` or `functools.partial(jax.pmap, ...)`."""
        return call.func.args[0].value if self._is_pmap_partial(call.func) else call.func

    def _refuse_pair(self, outer: cst.CSTNode, inner: cst.CSTNode, label: str, refused) -> None:
        self._report(outer, refused.code, f"{label}: nested pmap, {refused.message}; not migrated")
        line = self._position(outer)[0]
        self._report(
            inner, "PM206", f"pmap inside the nested pmap of line {line}, which is not migrated"
        )

    def _nested_arguments(self, outer: Level, inner: Level) -> tuple[list[cst.Arg], str]:
        """The 2-D helper's arguments: f, (outer axis, inner axis), specs, outer's extras."""
        check_levels(outer, inner)
        fun = inner.args.get("fun")
        if fun is None:
            raise NestedRefused("PM210", "the inner pmap is called without a function")
        names = tuple(
            cst.parse_expression(default) if _is_none(level.args.get("axis_name"))
            else level.args["axis_name"]
            for level, default in zip((outer, inner), DEFAULT_NAMES)
        )
        for name in names:
            if not _repeatable(name):
                raise NestedRefused(
                    "PM208", f"axis_name={self._code(name)} would be evaluated once per spec"
                )
        if self._code_fresh(names[0]) == self._code_fresh(names[1]):
            raise NestedRefused("PM206", f"both levels name the axis {self._code(names[0])}")
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
            f"one shard_map over a 2-D mesh {self._code_fresh(names_tuple)}, "
            f"in_specs={self._code_fresh(in_specs)}, out_specs={self._code_fresh(out_specs)}"
        )
        return args, summary

    def _rewrite_stacked(
        self, original: cst.FunctionDef, updated: cst.FunctionDef, stacked: list[cst.Decorator]
    ) -> cst.FunctionDef:
        """@partial(pmap, axis_name='i') over @partial(pmap, axis_name='j') -> one decorator."""
        labels = [f"@{self._code(d.decorator)}" for d in stacked]
        label = " over ".join(shorten(text, 50) for text in labels)
        try:
            if len(stacked) > 2:
                raise NestedRefused("PM206", "pmap nested three or more levels deep")
            position = list(original.decorators).index(stacked[0])
            if original.decorators[position + 1] is not stacked[1]:
                raise NestedRefused("PM206", "another decorator stands between the two pmaps")
            if original in self._maps_pmap or any(d in self._maps_pmap for d in stacked):
                raise NestedRefused("PM206", "the function holds another pmap as well")
            levels = [
                Level(d, level_arguments(list(d.decorator.args[1:])))
                if isinstance(d.decorator, cst.Call) else Level(d, {})
                for d in stacked
            ]
            for level in levels:
                if "fun" in level.args:
                    raise NestedRefused("PM206", "a pmap decorator names the function itself")
            levels[1].args["fun"] = cst.Name(original.name.value)
            args, summary = self._nested_arguments(*levels)
        except NestedRefused as refused:
            self._refuse_pair(stacked[0], stacked[1], label, refused)
            return updated
        if not self._migrated(stacked[0], label, summary):
            return updated
        self._needs_nested = True
        partial_func = next(
            (d.decorator.func for d in stacked if isinstance(d.decorator, cst.Call)), None
        )
        if partial_func is None:
            AddImportsVisitor.add_needed_import(self.context, "functools")
            partial_func = cst.parse_expression("functools.partial")
        args[0] = args[0].with_changes(value=cst.Name(NESTED_HELPER_NAME))
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

    # -- findings ------------------------------------------------------------------------------

    def _code_fresh(self, node: cst.CSTNode) -> str:
        return one_line(node)

    def _migrated(self, node: cst.CSTNode, label: str, summary: str) -> bool:
        """Report the migration of a site; False when a suppression keeps it as it is."""
        detail = f" ({summary})" if summary else ""
        detail += migration_note(self)
        if not self._report(node, "PM100", f"{label} -> jax.jit + jax.shard_map{detail}"):
            return False
        self.migrated_sites += 1
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


def _is_none(node: cst.BaseExpression | None) -> bool:
    return node is None or (isinstance(node, cst.Name) and node.value == "None")




__all__ = ["HELPER_MARKER", "PmapToShardMap"]
