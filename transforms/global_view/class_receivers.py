"""Whose attribute `x.name` is, for the checks that a class-held pmap's attribute is bound once
and called only where the analysis follows it (classes.py): the same attribute name on an
instance of another class is another object's, so it neither rebinds nor calls this class's
pmap.

Two receivers are known without running anything:
- `self.name` in a method of a module-level class, where `self` is the method's first
  parameter and nothing in the method (nested defs and lambdas included) binds that name
  again: an instance of that class (or of a subclass, which classes.py refuses for classes
  holding global pmaps);
- `obj.name` in a module-level function that binds `obj` once, as `obj = SomeClass(...)` of a
  class the module defines once: an instance of `SomeClass`. Such a call, when `SomeClass` holds
  the pmap, is the one instances.py follows in the function that creates the instances
  (class_uses.py), unless it stands in a def or lambda nested in that function.
Any other receiver is unknown, and the checks keep refusing it.
"""

from __future__ import annotations

import ast
import dataclasses


@dataclasses.dataclass(frozen=True)
class Receiver:
    """The class (by name) whose instance an attribute node is read from or stored on;
    `method`: the ClassDef the node's method belongs to (None in a module function);
    `nested`: the node stands in a def or lambda nested in that function."""

    cls: str
    method: ast.ClassDef | None
    nested: bool


def receivers(tree: ast.Module) -> dict[int, Receiver]:
    """id(`x.name` node) -> its Receiver, for every attribute node whose receiver is known."""
    defined = [s.name for s in tree.body if isinstance(s, ast.ClassDef)]
    classes = {name for name in defined if defined.count(name) == 1}
    found: dict[int, Receiver] = {}
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name in classes:
            for method in statement.body:
                if isinstance(method, ast.FunctionDef) and method.args.args \
                        and not method.decorator_list:
                    me = method.args.args[0].arg
                    if _bound_once(method, me):
                        _mark(method, {me: statement.name}, statement, found)
        elif isinstance(statement, ast.FunctionDef):
            instances = {}
            for node in ast.walk(statement):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name) \
                        and isinstance(node.value, ast.Call) \
                        and isinstance(node.value.func, ast.Name) \
                        and node.value.func.id in classes \
                        and _bound_once(statement, node.targets[0].id):
                    instances[node.targets[0].id] = node.value.func.id
            _mark(statement, instances, None, found)
    return found


def assignment_of(tree: ast.Module) -> dict[int, ast.Assign]:
    """id(target node) -> the `target = value` statement it is the only target of."""
    return {id(node.targets[0]): node for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and len(node.targets) == 1}


def _mark(function: ast.FunctionDef, names: dict[str, str], method, found) -> None:
    """Record the receiver of every `name.attribute` in `function` whose `name` is in
    `names`, noting whether it stands in a nested def or lambda."""
    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) \
                    and child.value.id in names:
                found[id(child)] = Receiver(names[child.value.id], method, nested)
            visit(child, nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda)))
    visit(function, False)


def _bound_once(function: ast.FunctionDef, name: str) -> bool:
    """`name` has exactly one binding in `function` (a parameter, an assignment, a def, an
    import, a loop or `with` target, ...), nested scopes included."""
    stores = [n for n in ast.walk(function)
              if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
              or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and n.name == name and n is not function
              or isinstance(n, ast.arg) and n.arg == name
              or isinstance(n, ast.alias) and (n.asname or n.name).split(".")[0] == name
              or isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names]
    return len(stores) == 1
