"""What a global site's own code shows about its calls: the defaults a call may leave out,
the names its mapped function closes over, and whether its body returns a tuple of results.
Pure functions of the `Site` (site_calls.py reads them for each call)."""

from __future__ import annotations

import ast

from transforms.global_view.module_info import own_returns
from transforms.global_view.sites import Site


def defaults_fill(site: Site, given: int) -> bool:
    """The call passes the first `given` parameters and defaults fill the rest: shard_map
    maps the given ones and the function takes its defaults, constants that pmap did not
    map either (a jitted def of the site takes the given parameters only)."""
    arguments = site.body.args
    defaulted = [a.arg for a in arguments.args[len(arguments.args) - len(arguments.defaults):]] \
        if arguments.defaults else []
    return not site.static and given < len(site.params) and not arguments.kwonlyargs \
        and all(p in defaulted for p in site.params[given:]) \
        and all(isinstance(d, ast.Constant) for d in arguments.defaults)


def closed_over(site: Site) -> list[ast.Name]:
    """The names a site's mapped function reads from the function that builds it: those of its
    expression (a lambda, a partial's keywords) and, for a def nested there, the names its body
    reads but does not bind; for a def a factory returned, the names of the factory's call."""
    found = []
    if site.function_node is not None and not site.factory and not site.holder:
        found += free_name_nodes(site.function_node)
    if site.closure_call is not None:  # the body reads its factory's names, bound by this call
        return found + free_name_nodes(site.closure_call)
    body = site.body
    if site.owner is not None and isinstance(body, ast.FunctionDef) and body.col_offset:
        bound = {a.arg for a in ast.walk(body.args) if isinstance(a, ast.arg)}
        bound |= {n.id for n in ast.walk(body) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, (ast.Store, ast.Del))}
        bound |= {n.name for n in ast.walk(body) if n is not body and isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        found += [n for n in ast.walk(body) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Load) and n.id not in bound]
    return found


def free_name_nodes(expression: ast.AST) -> list[ast.Name]:
    """The names an expression reads from the scope around it: not a lambda's own parameters
    (`lambda x: x * 2` closes over no `x`) nor a comprehension's variables. A walrus target
    counts: it binds in the enclosing function."""
    found: list[ast.Name] = []

    def visit(node: ast.AST, bound: frozenset) -> None:
        if isinstance(node, ast.Lambda):
            params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
                visit(default, bound)
            visit(node.body, bound | params)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            targets = {n.id for g in node.generators for n in ast.walk(g.target)
                       if isinstance(n, ast.Name)}
            for child in ast.iter_child_nodes(node):
                visit(child, bound | targets)
            return
        if isinstance(node, ast.Name):
            if node.id not in bound:
                found.append(node)
            return
        if isinstance(node, ast.NamedExpr):
            found.append(node.target)
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(expression, frozenset())
    return found


def tuple_of_results(site: Site) -> tuple | None:
    """(0, 0, ...), one per result, when every return of the body is a tuple literal of the
    same length >= 2 (no starred element); None otherwise."""
    body = site.body
    values = [body.body] if isinstance(body, ast.Lambda) else [
        n.value for n in own_returns(body)]
    lengths = {len(v.elts) if isinstance(v, ast.Tuple) and not any(
        isinstance(e, ast.Starred) for e in v.elts) else 0 for v in values}
    if len(lengths) != 1 or min(lengths) < 2:
        return None
    return (0,) * lengths.pop()
