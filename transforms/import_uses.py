"""Whether a module still uses the module-level binding of a name, scope by scope.

A migration can leave `import jax` unused: a module whose only uses were `jax.pmap(...)` and
`jax.device_put_sharded(...)` calls the helpers instead, and the helpers import jax in their
own bodies. `ast`'s loaded names cannot tell that apart from a use, since the helpers load
`jax` too; here a load counts only where it resolves to the module's binding, not to a
function's own import of the name. What cannot be seen as a load is counted as a use, so the
import stays: a string annotation or a doctest naming it, `__all__` listing it, a `global` or
`del` of it, a module-level rebinding.
"""

from __future__ import annotations

import ast
import re

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def module_binding_used(tree: ast.Module, name: str) -> bool:
    """Whether anything in `tree` may use the module-level binding of `name`. (Loads first:
    most modules still load it, and that walk stops at the first.)"""
    if _used_in(tree, name, top=True):
        return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global) and name in node.names:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                word.search(node.value) and (">>>" in node.value or node.value == name):
            return True  # a doctest, or `__all__ = [..., "jax"]`
        for annotation in _annotations(node):
            if any(isinstance(c, ast.Constant) and isinstance(c.value, str)
                   and word.search(c.value) for c in ast.walk(annotation)):
                return True
    return False


def _used_in(scope: ast.AST, name: str, top: bool = False) -> bool:
    for node in _own_nodes(scope):
        if isinstance(node, _SCOPES):
            if not _binds(node, name) and _used_in(node, name):
                return True
        elif isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load) or top:  # a module-level store or del: keep it
                return True
    return False


def _own_nodes(scope: ast.AST):
    """The nodes of `scope` outside its nested functions and lambdas: those are yielded, with
    the parts of them that run in `scope` (decorators, defaults, annotations), but their
    bodies are not entered. Class bodies belong to the enclosing scope for this purpose."""
    children = list(ast.iter_child_nodes(scope))
    if isinstance(scope, _SCOPES):
        children = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    stack = children[::-1]
    while stack:
        node = stack.pop()
        yield node
        parts = _outer_parts(node) if isinstance(node, _SCOPES) else ast.iter_child_nodes(node)
        stack.extend(reversed(list(parts)))


def _outer_parts(function: ast.AST) -> list[ast.AST]:
    """The parts of a def or lambda evaluated where it is defined, not in its own scope."""
    arguments = function.args
    parts = [*getattr(function, "decorator_list", ()), *arguments.defaults,
             *(d for d in arguments.kw_defaults if d is not None)]
    if not isinstance(function, ast.Lambda):
        parts += [a.annotation for a in (*arguments.posonlyargs, *arguments.args,
                                         *arguments.kwonlyargs, arguments.vararg,
                                         arguments.kwarg)
                  if a is not None and a.annotation is not None]
        parts += [function.returns] if function.returns is not None else []
    return parts


def _binds(function: ast.AST, name: str) -> bool:
    """Whether `function` binds `name` in its own scope (then its uses are not the module's)."""
    arguments = function.args
    if any(a.arg == name for a in (*arguments.posonlyargs, *arguments.args,
                                   *arguments.kwonlyargs, arguments.vararg, arguments.kwarg)
           if a is not None):
        return True
    for node in _own_nodes(function):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return True
    return False


def _annotations(node: ast.AST):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        yield node.returns
    if isinstance(node, ast.arg) and node.annotation is not None:
        yield node.annotation
    if isinstance(node, ast.AnnAssign):
        yield node.annotation
