"""Static check: every name a line added by the migration reads is bound before it runs.

`unbound_reads(original, migrated)` reads the migrated module in execution order (top-level
statements, a notebook's cells one after the other). The lines it adds or changes are those
difflib finds against the original. A name such a line reads when its top-level statement runs
(module code, a decorator, a default value, a class body) must be bound by an earlier
statement, or earlier in the same one: `@functools.cache` over the mesh function above the
cell that imports functools is the crash this catches. A name such a line reads inside a
function runs when the function is called, so it only has to be bound at module level
somewhere (jax imported only inside functions is not). Builtins and module dunders count as
bound. Written with `ast` alone; deliberately simple (a name bound in an `if` counts as bound). A name the original itself
reads unbound (a fragment's `f`) is left out: the migration need not bind it.
"""

from __future__ import annotations

import ast
import builtins
import difflib

ALWAYS_BOUND = frozenset(dir(builtins)) | {
    "__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__",
    "__annotations__",
}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def added_lines(original: str, migrated: str) -> set[int]:
    """1-based numbers of the lines of `migrated` that are not lines of `original`."""
    matcher = difflib.SequenceMatcher(None, original.splitlines(), migrated.splitlines(),
                                      autojunk=False)
    return {j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert")
            for j in range(j1, j2)}


def _bindings(node: ast.AST):
    """(name, binding node) for every name `node` binds in its own scope: not inside function,
    lambda or class bodies, nor comprehensions (their own scopes); a def or class binds its
    own name."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (*_FUNCTIONS, ast.ClassDef)):
            yield item.name, item
            continue
        if isinstance(item, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        if isinstance(item, ast.Name) and not isinstance(item.ctx, ast.Load):
            yield item.id, item
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            yield from ((a.asname or a.name.split(".")[0], item) for a in item.names
                        if a.name != "*")
        elif isinstance(item, ast.ExceptHandler) and item.name:
            yield item.name, item
        elif isinstance(item, (ast.MatchAs, ast.MatchStar)) and item.name:
            yield item.name, item
        elif isinstance(item, ast.MatchMapping) and item.rest:
            yield item.rest, item
        stack.extend(ast.iter_child_nodes(item))


def _stored(node: ast.AST) -> set[str]:
    return {name for name, _ in _bindings(node)}


def _function_locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    arguments = function.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                             *filter(None, [arguments.vararg, arguments.kwarg])]}
    if isinstance(function, ast.Lambda):
        return names
    declared = {n for s in ast.walk(function) if isinstance(s, (ast.Global, ast.Nonlocal))
                for n in s.names}
    for statement in function.body:
        names |= _stored(statement)
    return names - declared


def _reads(node: ast.AST, local: frozenset, deferred: bool, out: list) -> None:
    """(Name, deferred) for every name `node` reads that `local` (names bound by the
    enclosing functions, classes, comprehensions) does not bind; `deferred`: inside a function
    body, which runs when called."""
    if isinstance(node, (*_FUNCTIONS, ast.Lambda)):
        arguments = node.args
        for default in [*arguments.defaults, *filter(None, arguments.kw_defaults),
                        *getattr(node, "decorator_list", [])]:
            _reads(default, local, deferred, out)
        inner = local | _function_locals(node)
        for child in node.body if isinstance(node.body, list) else [node.body]:
            _reads(child, inner, True, out)
        return
    if isinstance(node, ast.ClassDef):
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            _reads(child, local, deferred, out)
        inner = local | set().union(*map(_stored, node.body))
        for child in node.body:
            _reads(child, inner, deferred, out)
        return
    if isinstance(node, _COMPREHENSIONS):
        local = local | {n.id for g in node.generators for n in ast.walk(g.target)
                         if isinstance(n, ast.Name)}
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
        out.append((node, deferred))
    for child in ast.iter_child_nodes(node):
        _reads(child, local, deferred, out)


def unbound_reads(original: str, migrated: str) -> list[str]:
    """What added lines of `migrated` read before it is bound, as `line N: name (why)`; not
    names the original itself reads unbound (a fragment's `f`, a cell that reads `jax` above
    the cell importing it): the migration does not have to bind what the user never did."""
    original, migrated = original.lstrip("\ufeff"), migrated.lstrip("\ufeff")
    users = {name for name, _, _ in _unbound(ast.parse(original), None)}
    tree = ast.parse(migrated)
    return [f"line {node.lineno}: `{name}` ({why})"
            for name, node, why in _unbound(tree, added_lines(original, migrated))
            if name not in users]


def _unbound(tree: ast.Module, lines: set[int] | None):
    """(name, Name node, why) for each read on `lines` (None: every line) of a name that is
    not bound when it runs."""
    anywhere = set(ALWAYS_BOUND)  # bound by a statement at module level, or declared global
    for statement in tree.body:
        anywhere |= _stored(statement)
    anywhere |= {n for s in ast.walk(tree) if isinstance(s, ast.Global) for n in s.names}
    bound = set(ALWAYS_BOUND)
    for statement in tree.body:
        reads: list = []
        _reads(statement, frozenset(), False, reads)
        for name, deferred in reads:
            if lines is not None and name.lineno not in lines:
                continue
            if deferred and name.id not in anywhere:
                yield name.id, name, "read in a function, bound nowhere at module level"
            elif not deferred and name.id not in bound and not _bound_earlier_in(
                    statement, name):
                yield name.id, name, "read before anything binds it"
        bound |= _stored(statement)


def _bound_earlier_in(statement: ast.stmt, name: ast.Name) -> bool:
    """A binding inside `statement` comes before the read (`if ...:` / `import x` / `x.y`)."""
    position = (name.lineno, name.col_offset)
    return any(bound == name.id and (node.lineno, node.col_offset) < position
               for bound, node in _bindings(statement))
