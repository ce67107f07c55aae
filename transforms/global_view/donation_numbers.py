"""Python numbers in the donated-read check (donation.py).

The rule: a Python number (int, float, complex, bool) is not a device buffer, so it holds no
array a step could donate, and arithmetic on numbers gives a number. Which expressions are
numbers, by their text alone:
- a number literal; a module-level name bound once, to a number literal, and never rebound;
- a local name every binding of which (in its function, nested scopes included) is a number,
  or a `for` target over `range(...)`; a parameter counts only where its number default is
  left by every call in the paths given (`ModuleInfo.defaults_left_numbers`);
- a call that always returns a number (`len`, `int`, `float`, `bool`, `complex`,
  `jax.device_count()`, `jax.process_index()`, ...), and `abs`, `round`, `max`, `min`, `pow`
  or a `math` function of numbers;
- arithmetic, a comparison, `and` / `or` or a conditional expression of numbers; `not x`.
Anything else may be an array (`n * x` with `x` an array is one), and keeps its tokens.
"""

from __future__ import annotations

import ast

from transforms.global_view.values import DEVICE_COUNT

NUMBER_TYPES = (int, float, complex, bool)
# Functions whose result is a Python number whatever they are given (or they raise).
NUMBER_RESULTS = DEVICE_COUNT | {"jax.process_index", "jax.process_count", "jax.host_id",
                                 "jax.host_count"}
NUMBER_BUILTINS = {"len", "int", "float", "bool", "complex"}
# Builtins that give a number when every argument is one (of an array: an array).
NUMBER_OF_NUMBERS = {"abs", "round", "max", "min", "pow"}

_OTHER = ("other",)  # a binding that may give the name any value
_RANGE = ("range",)  # `for i in range(...)`: an int
_NUMBER = ("number",)  # a parameter whose number default every call leaves


def is_number(node, names: set[str], local: set[str], constants: dict, builtin, qualify) -> bool:
    """Whether the expression `node` is a Python number (module docstring). `names`: the
    local names known to be numbers; `local`: every name the function binds (another name
    is a module-level one, a number if `constants` has it); `builtin(func)`: the builtin a
    call's function is, unshadowed, or None; `qualify(func)`: its qualified name."""
    def number(n) -> bool:
        if isinstance(n, ast.Constant):
            return type(n.value) in NUMBER_TYPES
        if isinstance(n, ast.Name):
            return n.id in names if n.id in local else type(constants.get(n.id)) in NUMBER_TYPES
        if isinstance(n, ast.BinOp):
            return not isinstance(n.op, ast.MatMult) and number(n.left) and number(n.right)
        if isinstance(n, ast.UnaryOp):
            return isinstance(n.op, ast.Not) or number(n.operand)
        if isinstance(n, ast.BoolOp):
            return all(number(v) for v in n.values)
        if isinstance(n, ast.Compare):
            return number(n.left) and all(number(c) for c in n.comparators)
        if isinstance(n, ast.IfExp):
            return number(n.body) and number(n.orelse)
        if isinstance(n, ast.Call):
            if any(isinstance(a, ast.Starred) for a in n.args) \
                    or any(k.arg is None for k in n.keywords):
                return False
            function = builtin(n.func)
            if function in NUMBER_BUILTINS or qualify(n.func) in NUMBER_RESULTS:
                return True
            given = [*n.args, *(k.value for k in n.keywords)]
            of_numbers = function in NUMBER_OF_NUMBERS and (len(n.args) >= 2 or function in (
                "abs", "round"))
            return bool(given) and (of_numbers or qualify(n.func).startswith("math.")) \
                and all(number(a) for a in given)
        return False
    return number(node)


def number_names(function: ast.FunctionDef, parameters: frozenset[str], others: set[str],
                 constants: dict, builtin, qualify) -> tuple[set[str], set[str]]:
    """The names `function` binds in its own scope that hold a Python number wherever they
    are read, and every name it binds in any of its scopes (`local` of `is_number`): every binding of the name in the function (nested scopes too, a conservative
    join) is a number, given the others found so far (a greatest fixpoint, so `n = n + 1`
    after `n = 0` is one). `parameters`: its own parameters whose number default every call
    leaves; `others`: names bound outside it too (top-level code's globals a def rebinds)."""
    bindings: dict[str, list] = {}
    own: set[str] = set()

    def add(name: str, binding, own_scope: bool) -> None:
        bindings.setdefault(name, []).append(binding)
        if own_scope:
            own.add(name)

    classified: set[int] = set()

    def target(node, binding, own_scope: bool) -> None:
        if isinstance(node, ast.Name):
            classified.add(id(node))
            add(node.id, binding, own_scope)

    for node, own_scope in _walk_scopes(function):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                target(t, ("value", node.value), own_scope)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target(node.target, ("value", node.value), own_scope)
        elif isinstance(node, ast.AugAssign):
            target(node.target, ("aug", node), own_scope)
        elif isinstance(node, ast.NamedExpr):
            target(node.target, ("value", node.value), own_scope)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            ranged = isinstance(node.iter, ast.Call) and builtin(node.iter.func) == "range"
            target(node.target, _RANGE if ranged else _OTHER, own_scope)
        elif isinstance(node, ast.arg):
            mine = own_scope and node.arg in parameters
            add(node.arg, _NUMBER if mine else _OTHER, own_scope)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node is not function:
            add(node.name, _OTHER, own_scope)
        elif isinstance(node, ast.alias):
            add((node.asname or node.name).split(".")[0], _OTHER, own_scope)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            add(node.name, _OTHER, own_scope)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                add(name, _OTHER, own_scope)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            add(node.name, _OTHER, own_scope)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            add(node.rest, _OTHER, own_scope)
    for node, own_scope in _walk_scopes(function):  # any other binding form: not followed
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) \
                and id(node) not in classified:
            add(node.id, _OTHER, own_scope)
    local = set(bindings)
    names = {name for name in own - set(others)
             if all(binding is not _OTHER for binding in bindings[name])}

    def holds(binding, candidates) -> bool:
        if binding in (_RANGE, _NUMBER):
            return True
        if binding[0] == "aug":
            statement = binding[1]
            return not isinstance(statement.op, ast.MatMult) and is_number(
                statement.value, candidates, local, constants, builtin, qualify)
        return is_number(binding[1], candidates, local, constants, builtin, qualify)

    while True:
        kept = {name for name in names if all(holds(b, names) for b in bindings[name])}
        if kept == names:
            return names, local
        names = kept


def module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound once, to a literal constant, and never rebound (a `global`
    declaration anywhere counts as a rebinding)."""
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                stores[name] = stores.get(name, 0) + 2
    found = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) \
                and isinstance(statement.value, ast.Constant) \
                and stores.get(statement.targets[0].id) == 1:
            found[statement.targets[0].id] = statement.value.value
    return found


def _walk_scopes(function: ast.FunctionDef):
    """Every node of `function` with whether it is in the function's own scope: not inside a
    nested def, lambda or class (their names and defaults are; comprehensions count as own,
    which only joins more bindings to a name)."""
    stack = [(function, True)]
    while stack:
        node, own_scope = stack.pop()
        yield node, own_scope
        nested = node is not function and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        for child in ast.iter_child_nodes(node):
            inner = own_scope and not (nested and _in_body(node, child))
            stack.append((child, inner))


def _in_body(scope, child) -> bool:
    """Whether `child` of the def, lambda or class `scope` runs in its own scope (its body
    and parameters) rather than where it is defined (decorators, defaults, bases)."""
    if isinstance(scope, ast.Lambda):
        return child is scope.body or child is scope.args
    if isinstance(scope, ast.ClassDef):
        return child in scope.body
    return child in scope.body or child is scope.args or child is scope.returns
