"""Which pmap sites of a module the global style can take, read with the standard `ast`.

A site qualifies when it is a module-level `def` decorated with `jax.pmap` or
`functools.partial(jax.pmap, ...)` (no other decorator), or a module-level
`name = jax.pmap(fn, ...)` of a lambda or a module-level function, with a literal string
`axis_name`, `in_axes` of 0 / None per argument, default `out_axes`, and at most
`donate_argnums` besides. Anything else is a `Blocker` the report names.
"""

from __future__ import annotations

import ast
import dataclasses

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
_ALLOWED_OPTIONS = {"axis_name", "in_axes", "donate_argnums"}


@dataclasses.dataclass(frozen=True)
class Blocker(Exception):
    code: str
    node: ast.AST
    message: str
    names: list = dataclasses.field(default_factory=list, compare=False)  # sites it keeps faithful


@dataclasses.dataclass
class Site:
    name: str  # the module-level name callers use
    node: ast.AST  # the decorator expression or the `jax.pmap(...)` call
    statement: ast.stmt  # the def or the assignment
    body: ast.FunctionDef | ast.Lambda  # the mapped function
    params: list[str]
    axis_name: str
    in_axes: tuple[int | None, ...]  # one per parameter
    donate: str | None  # source text of donate_argnums, or None
    decorated: bool


def dotted(node: ast.AST, imported: dict[str, str]) -> str:
    """`jax.pmap` for `jax.pmap`, `j.pmap` (import jax as j) or `pmap` (from jax import pmap)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imported:
        return ""
    return ".".join([imported[node.id], *reversed(parts)])


def pmap_call_options(call: ast.Call, imported: dict[str, str]) -> tuple[ast.AST, list, list] | None:
    """(function expression or None, positional options, keywords) of `jax.pmap(f, ...)` or
    `functools.partial(jax.pmap, ...)`; None for any other call."""
    name = dotted(call.func, imported)
    if name == PMAP:
        return (call.args[0] if call.args else None), call.args[1:], call.keywords
    if name == PARTIAL and call.args and dotted(call.args[0], imported) == PMAP:
        return None, call.args[1:], call.keywords
    return None


def find_sites(tree: ast.Module, imported: dict[str, str]) -> tuple[list[Site], list[Blocker]]:
    """The qualifying sites, and a blocker for every other pmap reference in the module."""
    sites, blockers, claimed = [], [], set()
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    for statement in tree.body:
        try:
            site = _site_of(statement, imported, functions)
        except Blocker as blocker:
            blockers.append(blocker)
            claimed.update(id(n) for n in ast.walk(statement))
            name = statement.name if isinstance(statement, ast.FunctionDef) else \
                getattr(statement.targets[0], "id", None) if isinstance(statement, ast.Assign) else None
            if name:
                blocker.names.append(name)
            continue
        if site is not None:
            sites.append(site)
            claimed.update(id(n) for n in ast.walk(site.node))
    for node in ast.walk(tree):
        if id(node) not in claimed and isinstance(node, (ast.Name, ast.Attribute)):
            if dotted(node, imported) == PMAP and isinstance(node.ctx, ast.Load):
                blockers.append(Blocker(
                    "PM601", node,
                    "this pmap is not a module-level decorated def or module-level assignment "
                    "(used as a value, built inside a function, or wrapped): kept in the "
                    "faithful style",
                ))
                claimed.update(id(n) for n in ast.walk(node))
    return sites, blockers


def _site_of(statement, imported, functions) -> Site | None:
    if isinstance(statement, ast.FunctionDef):
        for decorator in statement.decorator_list:
            if _is_pmap_decorator(decorator, imported):
                if len(statement.decorator_list) != 1:
                    raise Blocker("PM602", decorator, "pmap stacked with other decorators")
                options = ([], []) if not isinstance(decorator, ast.Call) else \
                    pmap_call_options(decorator, imported)[1:]
                return _site(statement.name, decorator, statement, statement, *options, True)
        return None
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        found = pmap_call_options(statement.value, imported)
        if found is None or dotted(statement.value.func, imported) != PMAP:
            return None
        function, positional, keywords = found
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            raise Blocker("PM601", statement, "pmap assigned to something other than one name")
        if isinstance(function, ast.Lambda):
            body = function
        elif isinstance(function, ast.Name) and function.id in functions:
            body = functions[function.id]
        else:
            raise Blocker("PM602", statement.value,
                          "the mapped function is not a lambda or a module-level def")
        return _site(statement.targets[0].id, statement.value, statement, body,
                     positional, keywords, False)
    return None


def _is_pmap_decorator(decorator, imported) -> bool:
    if isinstance(decorator, ast.Call):
        return dotted(decorator.func, imported) == PARTIAL and pmap_call_options(
            decorator, imported) is not None
    return dotted(decorator, imported) == PMAP


def _site(name, node, statement, body, positional, keywords, decorated) -> Site:
    options = {k.arg: k.value for k in keywords}
    if None in options:
        raise Blocker("PM602", node, "pmap options passed with **")
    if positional:
        if len(positional) > 1:
            raise Blocker("PM602", node, "pmap options given positionally beyond axis_name")
        options["axis_name"] = positional[0]
    unsupported = sorted(set(options) - _ALLOWED_OPTIONS)
    if unsupported:
        raise Blocker("PM602", node, f"pmap option {', '.join(unsupported)} is not supported "
                      "by the global style yet")
    axis = options.get("axis_name")
    if not (isinstance(axis, ast.Constant) and isinstance(axis.value, str)):
        raise Blocker("PM602", node, "axis_name is not a literal string")
    args = body.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
        raise Blocker("PM602", node, "the mapped function has *args, **kwargs, keyword-only "
                      "parameters or defaults")
    params = [a.arg for a in args.args]
    in_axes = _in_axes(options.get("in_axes"), len(params), node)
    donate = options.get("donate_argnums")
    if donate is not None and not _literal_ints(donate):
        raise Blocker("PM602", node, "donate_argnums is not a literal int or tuple of ints")
    return Site(name, node, statement, body, params, axis.value, in_axes,
                ast.unparse(donate) if donate is not None else None, decorated)


def _in_axes(node, count: int, where) -> tuple[int | None, ...]:
    if node is None:
        return (0,) * count
    if isinstance(node, ast.Constant) and node.value in (0, None) and type(node.value) is not bool:
        return (node.value,) * count
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == count:
        axes = []
        for element in node.elts:
            if not (isinstance(element, ast.Constant) and element.value in (0, None)
                    and type(element.value) is not bool):
                raise Blocker("PM602", where, "in_axes entries other than 0 or None")
            axes.append(element.value)
        return tuple(axes)
    raise Blocker("PM602", where, "in_axes is not 0, None or a flat tuple of them")


def _literal_ints(node) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    return isinstance(node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
