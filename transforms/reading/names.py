"""What a name in the module refers to, from its imports: a cheap stand-in for libcst's
QualifiedNameProvider.

libcst's scope analysis costs about six plain visits of the module, and rules only ever ask
"is this `jax.pmap` / `functools.partial` / `jax.device_put_replicated`?". Those names come
from imports, so a table of the module's imports (read with the standard `ast` module, an
order of magnitude cheaper) answers the question exactly, provided no import name is also
bound some other way (a parameter called `jax`, a `P = ...` next to `import ... as P`) and
there is no star import. In those modules `needs_scope_analysis` is true and the caller uses
libcst's provider instead: speed never changes an answer.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses

import libcst as cst

from transforms.reading.prefilter import all_nodes, parse_or_none

_BUILTINS = frozenset(dir(builtins))
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclasses.dataclass
class ImportTable:
    imported: dict[str, str]  # local name -> the dotted name it was imported as
    bound_otherwise: set[str]  # names bound by anything but an import
    needs_scope_analysis: bool

    @classmethod
    def from_source(cls, source: bytes) -> ImportTable:
        return cls.from_tree(parse_or_none(source))

    @classmethod
    def from_tree(cls, tree: ast.Module | None) -> ImportTable:
        if tree is None:  # grammar newer than this interpreter's ast
            return cls({}, set(), needs_scope_analysis=True)
        imported: dict[str, set[str]] = {}
        bound: set[str] = set()
        star = False
        for node in all_nodes(tree):
            kind = type(node)  # (isinstance on every node was most of this walk's cost)
            if kind is ast.Name:
                if type(node.ctx) is not ast.Load:
                    bound.add(node.id)
            elif kind is ast.Import:
                for alias in node.names:
                    if alias.asname:
                        imported.setdefault(alias.asname, set()).add(alias.name)
                    else:
                        root = alias.name.split(".")[0]
                        imported.setdefault(root, set()).add(root)
            elif kind is ast.ImportFrom:
                base = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name == "*":
                        star = True
                        continue
                    dotted = f"{base}.{alias.name}" if node.module else f"{base}{alias.name}"
                    imported.setdefault(alias.asname or alias.name, set()).add(dotted)
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
        ambiguous = star or any(len(v) > 1 or k in bound for k, v in imported.items())
        table = {name: next(iter(targets)) for name, targets in imported.items()}
        return cls(table, bound, needs_scope_analysis=ambiguous)

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
