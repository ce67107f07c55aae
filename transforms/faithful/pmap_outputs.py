"""Which names hold pmap outputs, for the Unreplicate rule (transforms/faithful/unreplicate.py).

It is decided lexically, per scope, conservatively. Each scope's bindings are collected from
its statements when the scope is entered (syntax only, read by scope_syntax.py); a name is a
pmap output only if every binding of it in its scope is the result of calling a pmapped function
whose `out_axes` is absent or 0, and a binding textually precedes the use. Bindings are
classified on first use, so files without the idioms pay for no name lookups.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from transforms.faithful.pmap_sites import PARTIAL, PMAP
from transforms.faithful.scope_syntax import (
    assignments,
    block,
    bound_by_compound,
    def_returns_sequence,
    is_self,
    names_in_target,
    other_bound_names,
    small_statements,
    statements,
    unpacked_names,
)
from transforms.reading.snippets import parameters as _all_params

OUTPUT, CALLABLE, OTHER = "output", "callable", "other"


@dataclasses.dataclass(frozen=True)
class _Unpacked:
    """`a, b = value`: `a` holds part of what `value` returns."""

    value: cst.BaseExpression


# What a binding binds: None (not a pmap-related value: a parameter, loop target, import,
# ...), an assigned expression, an _Unpacked one, or a decorated FunctionDef.
Binding = cst.CSTNode | _Unpacked | None


@dataclasses.dataclass(eq=False)
class _Scope:
    parent: _Scope | None
    is_class: bool = False
    comprehension: bool = False  # a walrus inside binds in the enclosing scope
    names: dict[str, list[Binding]] = dataclasses.field(default_factory=dict)
    bound: set[str] = dataclasses.field(default_factory=set)  # bound before this point
    kinds: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    self_attrs: dict[str, list[Binding]] = dataclasses.field(default_factory=dict)  # classes
    self_kinds: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)

    def bind(self, name: str, binding: Binding) -> None:
        self.names.setdefault(name, []).append(binding)

    def lookup(self, name: str) -> _Scope | None:
        """Python's rule: the innermost scope binding `name`; class bodies are not seen from
        the functions inside them."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names and (scope is self or not scope.is_class):
                return scope
            scope = scope.parent
        return None

    def enclosing_class(self) -> _Scope | None:
        scope = self.parent
        while scope is not None and not scope.is_class:
            scope = scope.parent
        return scope


class PmapOutputs:
    """Unreplicate's tracking of pmap outputs (a mixin of the rule)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scopes: list[_Scope] = []
        self._scope_of: dict[cst.CSTNode, _Scope] = {}  # the scope a binding was made in

    # -- scopes: collected from statements when entered -------------------------------------------

    def _enter(self, scope: _Scope) -> None:
        self._scopes.append(scope)

    def _leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        self._scopes.pop()
        return updated_node

    @property
    def _scope(self) -> _Scope:
        return self._scopes[-1]

    def visit_Module(self, node: cst.Module) -> None:
        self._enter(self._collect(_Scope(parent=None), node.body))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        scope = _Scope(parent=self._scope)
        for param in _all_params(node.params):
            scope.bind(param.name.value, None)
        self._enter(self._collect(scope, block(node)))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        scope = self._collect(_Scope(parent=self._scope, is_class=True), block(node))
        for method in statements(block(node)):
            if isinstance(method, cst.FunctionDef):
                for small in small_statements(block(method)):
                    for target, value in assignments(small):
                        if isinstance(target, cst.Attribute) and is_self(target.value):
                            scope.self_attrs.setdefault(target.attr.value, []).append(value)
        self._enter(scope)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        scope = _Scope(parent=self._scope)
        for param in _all_params(node.params):
            scope.bind(param.name.value, None)
        self._enter(scope)

    def _visit_comprehension(self, node: cst.CSTNode) -> None:
        scope = _Scope(parent=self._scope, comprehension=True)
        clause = node.for_in
        while clause is not None:
            for name in names_in_target(clause.target):
                scope.bind(name.value, None)
            clause = clause.inner_for_in
        self._enter(scope)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension
    leave_Module = leave_FunctionDef = leave_ClassDef = leave_Lambda = _leave
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave

    def _collect(self, scope: _Scope, body) -> _Scope:
        """Every name the statements of one scope bind, with what they bind (syntax only)."""
        for stmt in statements(body):
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                scope.bind(stmt.name.value, stmt if isinstance(stmt, cst.FunctionDef) else None)
            for name in bound_by_compound(stmt):
                scope.bind(name.value, None)
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                for target, value in assignments(small):
                    if value is not None:
                        self._scope_of[value] = scope
                    if isinstance(target, cst.Name):
                        scope.bind(target.value, value)
                    elif isinstance(target, (cst.Tuple, cst.List)):
                        # A starred name holds a list of parts, which `[0]` indexes as a list.
                        for name, starred in unpacked_names(target):
                            unpacked = None if starred or value is None else _Unpacked(value)
                            scope.bind(name.value, unpacked)
                for name in other_bound_names(small):
                    scope.bind(name.value, None)
        return scope

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        """A name is trusted as a pmap output only after (in source order) it was bound."""
        for target in original_node.targets:
            self._scope.bound.update(n.value for n in names_in_target(target.target))
        return updated_node

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        """`(out := ...)`: expressions are not collected, so the binding is added when met."""
        scope = next(s for s in reversed(self._scopes) if not s.comprehension)
        for name in names_in_target(node.target):
            scope.bind(name.value, None)
            scope.kinds.pop(name.value, None)

    def leave_AnnAssign(
        self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign
    ) -> cst.AnnAssign:
        self._scope.bound.update(n.value for n in names_in_target(original_node.target))
        return updated_node

    # -- kinds: classified on first use -----------------------------------------------------------

    def _kinds(self, scope: _Scope, name: str) -> frozenset[str]:
        if name not in scope.kinds:
            scope.kinds[name] = frozenset({OTHER})  # while computing: `p = p(x)` is no output
            scope.kinds[name] = frozenset(self._kind(b) for b in scope.names[name])
        return scope.kinds[name]

    def _self_kinds(self, scope: _Scope, attr: str) -> frozenset[str]:
        if attr not in scope.self_kinds:
            scope.self_kinds[attr] = frozenset({OTHER})
            scope.self_kinds[attr] = frozenset(
                CALLABLE if b is not None and self._is_pmap_function_value(b) else OTHER
                for b in scope.self_attrs.get(attr, ())
            )
        return scope.self_kinds[attr]

    def _kind(self, binding: Binding) -> str:
        if binding is None:
            return OTHER
        if isinstance(binding, cst.FunctionDef):
            return CALLABLE if self._is_pmap_decorated(binding) else OTHER
        if isinstance(binding, _Unpacked):
            value = binding.value
        elif self._is_pmap_function_value(binding):
            return CALLABLE
        else:
            value = binding
        if not isinstance(value, cst.Call):
            return OTHER
        scope = self._scope_of[value]
        if not self._is_pmapped_function(value.func, scope):
            return OTHER
        if value is binding and self._returns_sequence(value.func, scope):
            return OTHER  # `out = p(x)` with p returning a tuple: `out[0]` is an output
        return OUTPUT

    def _is_pmap(self, node: cst.CSTNode) -> bool:
        return isinstance(node, (cst.Name, cst.Attribute)) and PMAP in self._qualified(node)

    def _is_pmap_partial(self, node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.Call)
            and bool(node.args)
            and not node.args[0].keyword
            and not node.args[0].star
            and self._is_pmap(node.args[0].value)
            and PARTIAL in self._qualified(node.func)
        )

    def _pmap_arguments(self, node: cst.CSTNode) -> list[cst.Arg] | None:
        """pmap's arguments, for an expression that is a pmap site making a pmapped function
        or a pmap decorator (`jax.pmap`, `jax.pmap(f, ...)`, `functools.partial(jax.pmap, ...)`
        and `functools.partial(jax.pmap, ...)(f)`); else None."""
        if self._is_pmap(node):
            return []
        if not isinstance(node, cst.Call):
            return None
        if node.args and self._is_pmap(node.func):
            return list(node.args)
        if self._is_pmap_partial(node):
            return list(node.args[1:])
        if isinstance(node.func, cst.Call) and self._is_pmap_partial(node.func):
            return list(node.func.args[1:])
        return None

    def _maps_leading_axis(self, site: cst.CSTNode) -> bool:
        """A pmap site whose outputs are mapped on axis 0: out_axes absent or literally 0."""
        args = self._pmap_arguments(site)
        if args is None or any(a.star for a in args):
            return False
        for arg in args:
            if arg.keyword and arg.keyword.value == "out_axes":
                return isinstance(arg.value, cst.Integer) and arg.value.value == "0"
        return True

    def _is_pmap_function_value(self, value: cst.CSTNode) -> bool:
        """`jax.pmap(f, ...)` or `functools.partial(jax.pmap, ...)(f)`, mapped on axis 0 (a
        partial without its function is a decorator, not a pmapped function)."""
        return (
            isinstance(value, cst.Call)
            and not self._is_pmap_partial(value)
            and self._maps_leading_axis(value)
        )

    def _is_pmap_decorated(self, node: cst.FunctionDef) -> bool:
        """`@jax.pmap` / `@functools.partial(jax.pmap, ...)` as the outermost decorator."""
        return bool(node.decorators) and self._maps_leading_axis(node.decorators[0].decorator)

    def _is_pmapped_function(self, node: cst.CSTNode, scope: _Scope) -> bool:
        if isinstance(node, cst.Name):
            owner = scope.lookup(node.value)
            return owner is not None and self._kinds(owner, node.value) == {CALLABLE}
        if isinstance(node, cst.Attribute) and is_self(node.value):
            owner = scope.enclosing_class() if not scope.is_class else None
            return owner is not None and self._self_kinds(owner, node.attr.value) == {CALLABLE}
        return self._is_pmap_function_value(node)  # `jax.pmap(f)(x)` on the spot

    def _returns_sequence(self, pmapped: cst.CSTNode, scope: _Scope) -> bool:
        """Whether a pmapped function visibly returns a tuple or list of outputs."""
        if isinstance(pmapped, cst.Name):
            owner = scope.lookup(pmapped.value)
            sites = owner.names[pmapped.value] if owner else []
            return any(self._site_returns_sequence(s, owner) for s in sites)
        if isinstance(pmapped, cst.Attribute) and is_self(pmapped.value):
            owner = scope.enclosing_class() if not scope.is_class else None
            sites = owner.self_attrs.get(pmapped.attr.value, []) if owner else []
            return any(self._site_returns_sequence(s, owner) for s in sites)
        return self._site_returns_sequence(pmapped, scope)

    def _site_returns_sequence(self, site: Binding, scope: _Scope) -> bool:
        if isinstance(site, cst.FunctionDef):
            return def_returns_sequence(site)
        args = self._pmap_arguments(site) if isinstance(site, cst.CSTNode) else None
        if isinstance(site, cst.Call) and isinstance(site.func, cst.Call):
            args = site.args  # `functools.partial(jax.pmap, ...)(f)`: f is the callee
        callee = next((a.value for a in args or () if not a.keyword and not a.star), None)
        if isinstance(callee, cst.Lambda):
            return isinstance(callee.body, (cst.Tuple, cst.List))
        if isinstance(callee, cst.Name):
            owner = scope.lookup(callee.value)
            defs = owner.names[callee.value] if owner else []
            return any(isinstance(d, cst.FunctionDef) and def_returns_sequence(d) for d in defs)
        return False

    def _is_pmap_output(self, node: cst.CSTNode) -> bool:
        """A name bound to a pmap output, a call of a pmapped function, or a string key of one."""
        if isinstance(node, cst.Name):
            owner = self._scope.lookup(node.value)
            return (
                owner is not None
                and node.value in owner.bound
                and self._kinds(owner, node.value) == {OUTPUT}
            )
        if isinstance(node, cst.Call):
            return self._is_pmapped_function(node.func, self._scope) and not self._returns_sequence(
                node.func, self._scope
            )
        if isinstance(node, cst.Subscript) and len(node.slice) == 1:
            index = node.slice[0].slice
            return (
                isinstance(index, cst.Index)
                and isinstance(index.value, cst.SimpleString)
                and self._is_pmap_output(node.value)
            )
        return False
