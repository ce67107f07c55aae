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

The rule is one class in four files: this one finds the sites and tracks scopes and bindings;
pmap_site_rewrite.py rewrites a plain site, pmap_site_nested.py a nested or stacked pair, and
pmap_site_values.py pmap used as a value.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.multiprocess import migration_note, nested_note, pmap_helper_source
from transforms.faithful.pmap_hazards import site_claimed
from transforms.faithful.pmap_site_nested import NestedSites
from transforms.faithful.pmap_site_rewrite import SiteRewrite
from transforms.faithful.pmap_site_values import ValueUses
from transforms.faithful.pmap_values import NameUses, ValueUse
from transforms.helpers.helper_features import features_of, site_features
from transforms.helpers.nested_pmap_helper import NESTED_HELPER_NAME, nested_helper_source
from transforms.helpers.pmap_compat_helper import COMPAT_HELPER_NAME, compat_helper_source
from transforms.helpers.runtime_helper import HELPER_MARKER, HELPER_NAME
from transforms.imports import RuleContext, add_import, remove_import
from transforms.module_helpers import helper_base, helper_statements, renamed_text, request_helper
from transforms.reading.pmap_bindings import PmappedNames
from transforms.reading.snippets import find_all, one_line
from transforms.reporting import ReportingTransformer
from transforms.suppressions import Suppressions
from transforms.target import TargetJax

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
PARTITION_SPEC_NAMES = {"jax.sharding.PartitionSpec", "jax.P", "jax.sharding.P"}
PMAP_LIKE_HELPERS = {HELPER_NAME, COMPAT_HELPER_NAME, NESTED_HELPER_NAME}


class PmapToShardMap(SiteRewrite, NestedSites, ValueUses, ReportingTransformer):
    """One pass over a module: rewrite pmap sites, ask for the helpers once, tidy imports."""

    PREFILTER_WORDS = (rb"pmap",)

    def __init__(
        self, context: RuleContext, target: TargetJax, suppressions: Suppressions | None = None
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
        self._helper_features: set[str] = set()  # what the 1-D helper's sites use

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
            names = find_all(module, cst.Name, lambda n: n.value == "P")
            meanings = [self._qualified(name) for name in names]
        if any(q and not q & PARTITION_SPEC_NAMES for q in meanings):
            return cst.parse_expression("jax.sharding.PartitionSpec")
        return cst.Name("P")

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        updated_node = self._migrate_values(updated_node)
        if not self.migrated_sites:
            return updated_node
        if self._uses_spec:
            if isinstance(self._spec_func, cst.Name):
                add_import(
                    self.context, "jax.sharding", "PartitionSpec", asname="P"
                )
            else:
                add_import(self.context, "jax")
        for asname in self._pmap_from_imports(original_node):
            remove_import(self.context, "jax", "pmap", asname)
        if self._needs_plain or self._needs_compat:
            updated_node = self._request_plain_helper(updated_node)
        if self._needs_compat:
            request_helper(self.context, COMPAT_HELPER_NAME, compat_helper_source())
        if self._needs_nested:
            request_helper(self.context, NESTED_HELPER_NAME, nested_helper_source(self.target))
        return updated_node

    def _request_plain_helper(self, module: cst.Module) -> cst.Module:
        """Ask for the 1-D helper with the features the module's sites use. A module migrated
        before keeps its own, unless a new site needs a feature that one lacks: then it is
        replaced by the helper with the features of both."""
        name = self._helper_name(HELPER_NAME)
        existing = self._names.module_defs.get(name, [])
        if existing and isinstance(existing[-1].params.star_arg, cst.Param):
            existing = []  # a notebook's stub for an earlier cell's (full) helper: kept as is
        own = self._code(existing[-1]) if existing else ""
        have = features_of(own)
        text = pmap_helper_source(
            self, self._helper_features | have, compat=self._needs_compat, existing=own)
        request_helper(self.context, HELPER_NAME, text)
        if not existing or features_of(text) <= have:
            return module
        new = helper_statements(renamed_text(text, {HELPER_NAME: name}), module.default_newline)[0]
        return module.with_changes(body=[
            new.with_changes(leading_lines=s.leading_lines)
            if isinstance(s, cst.FunctionDef) and s.name.value == name else s
            for s in module.body])

    def _pmap_from_imports(self, module: cst.Module) -> list[str | None]:
        """The `as` names (None: none) of every `from jax import pmap [as x]`."""
        if self.facts is not None and not self.facts.imports.needs_scope_analysis:
            imported = self.facts.imports.imported
            return [None if local == "pmap" else local
                    for local, name in imported.items() if name == PMAP]
        found = []
        for statement in find_all(module, cst.ImportFrom,
                                  lambda n: isinstance(n.module, cst.Name) and n.module.value == "jax"):
            if isinstance(statement.names, cst.ImportStar):
                continue
            for alias in statement.names:
                if isinstance(alias.name, cst.Name) and alias.name.value == "pmap":
                    found.append(alias.asname.name.value if alias.asname else None)
        return found

    # -- scopes and bindings ----------------------------------------------------------------

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
            inner = [n for n in find_all(node.body, (cst.Call, cst.Name, cst.Attribute))
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
        if not isinstance(node, cst.Name):
            return False
        helper = helper_base(node.value)
        return helper in PMAP_LIKE_HELPERS and node.value == self._helper_name(helper)

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
                original_node, Code.NESTED_PMAP,
                f"@{self._code(original_node.decorator)}: pmap inside the function of another "
                "pmap, not directly pmap(pmap(f)); not migrated",
            )
            return updated_node
        if original_node in self._maps_pmap:
            self._report(
                original_node, Code.NESTED_PMAP,
                f"@{self._code(original_node.decorator)}: the function holds another pmap "
                "(not a direct pmap of a pmap); not migrated",
            )
            return updated_node
        if not self._migrated(original_node, "@" + self._code(original_node.decorator), ""):
            return updated_node
        self._needs_plain = True
        self._helper_features |= site_features(set(), original_node, self._parent)
        return updated_node.with_changes(decorator=cst.Name(self._helper_name(HELPER_NAME)))

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
        inner = find_all(fun, (cst.Call, cst.Name, cst.Attribute))
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

    # -- findings ------------------------------------------------------------------------------

    def _code_fresh(self, node: cst.CSTNode) -> str:
        return one_line(node)

    def _migrated(self, node: cst.CSTNode, label: str, summary: str, nested: bool = False) -> bool:
        """Report the migration of a site; False when a suppression keeps it as it is.
        `nested`: the single-process 2-D helper, which a multi-process module gets only where
        nothing the site depends on is multi-process (multiprocess.keeps_pmap)."""
        detail = f" ({summary})" if summary else ""
        detail += nested_note(self) if nested else migration_note(self)
        if not self._report(node, Code.PMAP_MIGRATED,
                            f"{label} -> jax.jit + jax.shard_map{detail}"):
            return False
        self.migrated_sites += 1
        return True


__all__ = ["HELPER_MARKER", "PmapToShardMap"]
