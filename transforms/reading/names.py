"""What a name in the module refers to, from its imports: a cheap stand-in for libcst's
QualifiedNameProvider.

libcst's scope analysis costs about six plain visits of the module, and rules only ever ask
"is this `jax.pmap` / `functools.partial` / `jax.device_put_replicated`?". Those names come
from imports, so a table of the module's imports (read with the standard `ast` module, an
order of magnitude cheaper) answers the question exactly, provided no import name is also
bound some other way (a parameter called `jax`, a `P = ...` next to `import ... as P`), no
name is imported only inside a def or class, and there is no star import. In those modules
`needs_scope_analysis` is true and the caller uses libcst's provider instead: speed never
changes an answer.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses

import libcst as cst

from transforms.reading.prefilter import all_nodes, parse_or_none

_BUILTINS = frozenset(dir(builtins))
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def dotted(node: ast.AST, imported: dict[str, str]) -> str:
    """`jax.pmap` for `jax.pmap`, `j.pmap` (import jax as j) or `pmap` (from jax import pmap),
    through the module's import table (local name -> dotted name); "" for a chain whose root
    is not imported, or anything but a name chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imported:
        return ""
    return ".".join([imported[node.id], *reversed(parts)])


def _module_scope_imports(body: list[ast.stmt]) -> dict[int, ast.Import | ast.ImportFrom]:
    """The imports that bind at module scope: in the module's statements and the blocks of its
    `if` / `try` / `with` / loops / `match`, not inside a def or a class."""
    found: dict[int, ast.Import | ast.ImportFrom] = {}
    pending = list(body)
    while pending:
        statement = pending.pop()
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            found[id(statement)] = statement
        elif not isinstance(statement, _DEFINITIONS):
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(statement, field, ()):
                    pending.extend(getattr(child, "body", ()) if isinstance(
                        child, (ast.ExceptHandler, ast.match_case)) else [child])
    return found


# Modules a program being migrated always has: jax, its public modules that no JAX release
# removed, numpy (a dependency of jax), and functools.
ALWAYS_IMPORTABLE = frozenset({
    "jax", "jax.numpy", "jax.lax", "jax.random", "jax.tree_util", "jax.nn", "jax.scipy",
    "jax.sharding", "numpy", "functools",
})


def _never_run_handlers(body: list[ast.stmt]) -> set[int]:
    """The nodes of the `except` blocks of module-level `try`s that only import modules a
    program on JAX always has (`try: import jax.numpy as jnp` / `except ImportError: jnp =
    None`): under JAX those imports succeed, so the handler never runs, and the try's own
    imports are the module's bindings, as if written plainly."""
    never: set[int] = set()
    for statement in body:
        if isinstance(statement, ast.Try) and statement.handlers and all(
                _imports_only_the_always_importable(s) for s in statement.body):
            never.update(id(n) for handler in statement.handlers for n in ast.walk(handler))
    return never


def _fallback_imports(tree: ast.Module) -> set[int]:
    """The from-imports of `except ImportError:` blocks that bind a name the `try` block's
    from-imports bind to an attribute of the same name (`try: from jax.extend.core import f
    as names` / `except ImportError: from jax.core import f as names`): one API at its old
    address, so not a second binding of the name; the try block's is the one read. (Not
    `import numpy as jnp` after `import jax.numpy as jnp`: another module, not the same API
    moved.)"""
    fallbacks: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        tried = {alias.asname or alias.name: alias.name for s in node.body
                 if isinstance(s, ast.ImportFrom) for alias in s.names}
        for handler in node.handlers:
            if not _catches_import_errors(handler):
                continue
            for statement in handler.body:
                if isinstance(statement, ast.ImportFrom) and all(
                        tried.get(alias.asname or alias.name) == alias.name
                        for alias in statement.names):
                    fallbacks.add(id(statement))
    return fallbacks


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return caught is None or any(isinstance(n, ast.Name) and n.id in (
        "ImportError", "ModuleNotFoundError") for n in names)


def _imports_only_the_always_importable(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Import):
        return all(alias.name in ALWAYS_IMPORTABLE for alias in statement.names)
    if isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
        return all(f"{statement.module}.{alias.name}" in ALWAYS_IMPORTABLE
                   for alias in statement.names)
    return False


@dataclasses.dataclass
class ImportTable:
    imported: dict[str, str]  # local name -> the dotted name it was imported as
    bound_otherwise: set[str]  # names bound by anything but an import
    ambiguous: bool  # a name bound twice, or a star import: no module-wide table exists
    # Names imported only inside defs or classes, so unbound at module level. The global style,
    # which reads `imported` module-wide, accepts them; libcst's rules resolve them by scope.
    only_in_functions: frozenset[str] = frozenset()

    @property
    def needs_scope_analysis(self) -> bool:
        return self.ambiguous or bool(self.only_in_functions)

    @classmethod
    def from_source(cls, source: bytes) -> ImportTable:
        return cls.from_tree(parse_or_none(source))

    @classmethod
    def from_tree(cls, tree: ast.Module | None) -> ImportTable:
        if tree is None:  # grammar newer than this interpreter's ast
            return cls({}, set(), ambiguous=True)
        imported: dict[str, set[str]] = {}
        bound: set[str] = set()
        star = False
        module_scope = _module_scope_imports(tree.body)
        nested_only: set[str] = set()  # names imported inside defs or classes, never at the top
        never_run = _never_run_handlers(tree.body) | _fallback_imports(tree)
        for node in all_nodes(tree):
            if never_run and id(node) in never_run:
                continue
            kind = type(node)  # (isinstance on every node was most of this walk's cost)
            if kind is ast.Name:
                if type(node.ctx) is not ast.Load:
                    bound.add(node.id)
            elif kind is ast.Import:
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    imported.setdefault(name, set()).add(alias.name if alias.asname else name)
                    if id(node) not in module_scope:
                        nested_only.add(name)
            elif kind is ast.ImportFrom:
                base = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name == "*":
                        star = True
                        continue
                    dotted = f"{base}.{alias.name}" if node.module else f"{base}{alias.name}"
                    imported.setdefault(alias.asname or alias.name, set()).add(dotted)
                    if id(node) not in module_scope:
                        nested_only.add(alias.asname or alias.name)
            elif kind in _DEFINITIONS:
                bound.add(node.name)
            elif kind is ast.arg:
                bound.add(node.arg)
            elif kind is ast.ExceptHandler:
                if node.name:
                    bound.add(node.name)
            elif kind is ast.Global or kind is ast.Nonlocal:
                bound.update(node.names)
            elif kind is ast.MatchAs or kind is ast.MatchStar:
                if node.name:
                    bound.add(node.name)
            elif kind is ast.MatchMapping and node.rest:
                bound.add(node.rest)
        nested_only -= {alias.asname or alias.name.split(".")[0]
                        for node in module_scope.values() for alias in node.names}
        ambiguous = star or any(len(v) > 1 or k in bound for k, v in imported.items())
        table = {name: next(iter(targets)) for name, targets in imported.items()}
        # A name imported only inside a function is unbound at module level: a faithful helper's
        # own `import functools` must not make the module's `functools.partial` resolve.
        return cls(table, bound, ambiguous, frozenset(nested_only))

    def qualified(self, node: cst.CSTNode, parent: cst.CSTNode | None) -> set[str]:
        """The qualified names of a Name or dotted Attribute, as QualifiedNameProvider gives
        them for imported and builtin names; {name} for other bound names."""
        if isinstance(node, cst.Name):
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                return set()  # `pmap` in `jax.pmap` is not a reference by itself
            return self.names_for(node.value)
        if isinstance(node, cst.Attribute):
            parts = []
            current: cst.BaseExpression = node
            while isinstance(current, (cst.Attribute, cst.Call, cst.Subscript)):
                # As libcst names `np.zeros(3).reshape`: numpy.zeros.reshape.
                if isinstance(current, cst.Attribute):
                    parts.append(current.attr.value)
                    current = current.value
                else:
                    current = current.func if isinstance(current, cst.Call) else current.value
            if not isinstance(current, cst.Name):
                return set()
            if current.value not in self.imported:
                # libcst names `type(e).__name__` after the builtin alone: builtins.type.
                builtin = self.names_for(current.value) & {f"builtins.{current.value}"}
                return builtin
            return {".".join([self.imported[current.value], *reversed(parts)])}
        return set()

    def names_for(self, name: str) -> set[str]:
        """The qualified names of a bare name where it is a reference."""
        if name == "None":
            return set()
        if name in self.imported:
            return {self.imported[name]}
        if name in self.bound_otherwise:
            return {name}
        if name in _BUILTINS:
            return {f"builtins.{name}"}
        return set()
