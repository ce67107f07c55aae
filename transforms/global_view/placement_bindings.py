"""Where a multi-process caller may make a host value global once, where it is bound.

Multi-process global code makes a host value global at the step's call: `jax.device_put(v,
NamedSharding(mesh, P()))` (which also checks, across processes, that every process passes
the same value) or `jax.make_array_from_process_local_data(NamedSharding(mesh, P(axis)), v)`.
A value passed to several calls, or to a call in a loop, is converted at each of them. It
can be converted once, where it is bound, when nothing but those calls reads the name: then no
host read sees a global array, and every process converts it at the same point of the same
straight-line code. This module finds such names from the syntax alone; the caller analysis
(multiprocess.py) moves the conversion only where every read is placed the same way and none
is donated (a donated conversion must stay fresh at each call).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses

# What an assignment may bind: a new value, not an alias of one read elsewhere (a name, an
# attribute, a subscript could be changed in place through the other reference in between).
FRESH = (ast.Call, ast.Dict, ast.List, ast.Tuple)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
BUILTINS = frozenset(dir(builtins))


@dataclasses.dataclass(frozen=True)
class Binding:
    """`name`, bound once by `statement` (an assignment, or a `for` whose target it is), and
    the node ids of every read of it, all arguments of calls."""

    name: str
    statement: ast.Assign | ast.For
    reads: frozenset[int]


def placement_bindings(function: ast.FunctionDef, module: ast.Module) -> dict[str, Binding]:
    """The names of `function` whose conversion can move to their binding, if the calls that
    read them all convert them the same way (the caller analysis checks that part)."""
    steady = _steady_module_names(module)
    parents: dict[int, ast.AST] = {}
    blocks: dict[int, list] = {}  # statement -> the block it is in
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for statement in block:
                    blocks[id(statement)] = block
    declared = {name for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal))
                for name in node.names}
    declared |= {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    names: dict[str, list[ast.Name]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            names.setdefault(node.id, []).append(node)
    found = {}
    for name, uses in names.items():
        stores = [u for u in uses if not isinstance(u.ctx, ast.Load)]
        reads = [u for u in uses if isinstance(u.ctx, ast.Load)]
        if name in declared or len(stores) != 1 or not isinstance(stores[0].ctx, ast.Store) \
                or not reads or not all(_is_call_argument(r, parents) for r in reads) \
                or any(_in_nested_scope(r, function, parents) for r in reads):
            continue
        statement = parents[id(stores[0])]
        if isinstance(statement, ast.Assign):
            region = _assignment_region(statement, function, blocks)
        elif isinstance(statement, ast.For) and statement.target is stores[0]:
            region = _loop_region(statement, function, parents)
        else:
            continue
        if region is None or not all(any(_inside(r, s) for s in region) for r in reads):
            continue
        source = statement.value if isinstance(statement, ast.Assign) else statement.iter
        if _may_change_in_place(_sources(source, function, steady), region):
            continue
        # Worth it only where the conversion would run more than once per binding. In a
        # loop's body, a read must run whenever the binding does (directly in the region's
        # own statements), so that the conversion runs on no iteration where none did: an
        # iteration's count may be the process's own. The function's body runs on every
        # process, and a step's reads are proven the same on every process.
        repeated = len(reads) > 1 or any(isinstance(n, LOOPS) for s in region
                                         for n in ast.walk(s) if any(_inside(r, n) for r in reads))
        direct = isinstance(statement, ast.Assign) \
            and blocks[id(statement)] is function.body \
            or any(_directly_in(r, region, parents) for r in reads)
        if repeated and direct:
            found[name] = Binding(name, statement, frozenset(id(r) for r in reads))
    return found


def _is_call_argument(node: ast.Name, parents) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, ast.Starred):
        node, parent = parent, parents.get(id(parent))
    return isinstance(parent, ast.Call) and any(a is node for a in parent.args)


def _in_nested_scope(node, function, parents) -> bool:
    """Read in a def or lambda inside the function: it runs when that runs, not in order."""
    while node is not function:
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and node is not function:
            return True
    return False


def _assignment_region(statement: ast.Assign, function, blocks) -> list | None:
    """The statements after `name = value` in its block, where the block is the function's
    body or a loop's (run by every process that runs the function, or the loop's iteration)."""
    if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name) \
            or not isinstance(statement.value, FRESH):
        return None
    block = blocks.get(id(statement))
    if block is None or not (block is function.body or any(
            isinstance(n, LOOPS) and n.body is block for n in ast.walk(function))):
        return None
    return block[block.index(statement) + 1:]


def _loop_region(statement: ast.For, function, parents) -> list | None:
    """A `for name in ...:` loop's body, where the conversion goes first (not on the `for`
    line itself, nor before a def or class whose decorators would come first)."""
    first = statement.body[0]
    if first.lineno == statement.lineno or isinstance(
            first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or statement.orelse:
        return None
    node = statement
    while node is not function:  # not in a nested def or lambda, whose scope is its own
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) \
                and node is not function:
            return None
    return statement.body


def _inside(node, statement) -> bool:
    return any(child is node for child in ast.walk(statement))


def _directly_in(read, region, parents) -> bool:
    """`read` runs whenever the region's statement holding it runs: no if, loop, try, with,
    comprehension, lambda, or short-circuit operator between them."""
    node = parents[id(read)]
    while not any(node is statement for statement in region):
        if isinstance(node, (ast.If, ast.IfExp, ast.BoolOp, ast.Try, ast.With, ast.AsyncWith,
                             ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.comprehension, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.GeneratorExp, ast.Match, *LOOPS)):
            return False
        node = parents[id(node)]
    return not isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.Match, *LOOPS)) \
        or _header_holds(node, read)


def _header_holds(statement, read) -> bool:
    """A compound statement runs its header (a loop's iterable, an if's test) whenever it runs."""
    header = getattr(statement, "iter", None) or getattr(statement, "test", None)
    return header is not None and _inside(read, header)


def _steady_module_names(module: ast.Module) -> set[str]:
    """Module-level names no code changes in place: imports, defs, classes, and constants."""
    names = set()
    for statement in module.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in statement.names}
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.Assign) and all(
                isinstance(n, (ast.Constant, ast.Tuple, ast.Load, ast.UnaryOp, ast.unaryop))
                for n in ast.walk(statement.value)):
            names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
    return names


def _sources(value, function, steady) -> set[str] | None:
    """The local names the value may share memory with: those it reads, and, through the
    function's assignments, those they were built from. None if it reads a module-level name
    other code could change in place (or a name bound another way than by assignment)."""
    bound: dict[str, list] = {}
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For,
                                                ast.comprehension)) else []
        source = node.iter if isinstance(node, (ast.For, ast.comprehension)) else \
            getattr(node, "value", None)
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    bound.setdefault(name.id, []).append(source)
    parameters = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    found: set[str] = set()
    pending = [value]
    while pending:
        for node in ast.walk(pending.pop()):
            if not isinstance(node, ast.Name) or node.id in found:
                continue
            if node.id in bound:
                found.add(node.id)
                pending.extend(v for v in bound[node.id] if v is not None)
            elif node.id in parameters:
                found.add(node.id)
            elif node.id not in steady and node.id not in BUILTINS:
                return None
    return found


def _may_change_in_place(names: set[str] | None, region: list) -> bool:
    """Whether code in `region` could change one of `names`' objects in place: an item or
    attribute stored through it, a method called on it, it passed to a call, or it read
    in a nested def or lambda (which could do any of these later)."""
    if names is None:
        return True
    for statement in region:
        for node in ast.walk(statement):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            if any(_root(t) in names for t in targets if not isinstance(t, ast.Name)):
                return True
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id in names:
                return True  # `x += 1` changes a numpy array in place
            if isinstance(node, ast.Call):
                passed = [*node.args, *(k.value for k in node.keywords)]
                if any(_root(a) in names for a in passed) or (
                        isinstance(node.func, ast.Attribute) and _root(node.func.value) in names):
                    return True
            if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    isinstance(n, ast.Name) and n.id in names for n in ast.walk(node)):
                return True
    return False


def _root(node) -> str | None:
    """The name an expression such as `x`, `*x`, `x[0].w` or `x.T` starts from."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
