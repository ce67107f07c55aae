"""A pmap built and called inside one method is that method's local, exactly like a pmap in a
function: bound to a local name (or called where it is built, or a nested def decorated with
pmap), never stored on `self`, never returned. The method is read as a caller of its own, by
the name `Class.method` (no def can have it), as `callers.top_level_function` reads a module's
top-level code: what the method gets from `self` and its parameters is unknown (the stacked
floor per value), and what its site gives back must stay in the method, since the method's
callers (`self.method(...)`, a framework) are not followed: a method caller that returns a
global value, or stores one on `self` or in an argument, keeps the contract (the dataflow
refuses such consumers, fixpoint.py refuses the returns)."""

from __future__ import annotations

import ast
import copy


def method_callers(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """`Class.method` -> the method of a module-level, undecorated class, as a function of
    that name (a shallow copy: its body is the method's own nodes), for each plain method
    (no decorator: not a static or class method, nor a property) that mentions a pmap."""
    found = {}
    for statement in tree.body:
        if not isinstance(statement, ast.ClassDef) or statement.decorator_list:
            continue
        for method in statement.body:
            if isinstance(method, ast.FunctionDef) and not method.decorator_list \
                    and method.args.args:
                caller = copy.copy(method)
                caller.name = f"{statement.name}.{method.name}"
                found[caller.name] = caller
    return found


def is_method_caller(name: str | None) -> bool:
    """A caller name `method_callers` made (module functions' names have no dot)."""
    return name is not None and "." in name
