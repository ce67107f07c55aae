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
    return not site.static and given < len(site.params) and not arguments.kwonlyargs \
        and len(site.params) - given <= len(arguments.defaults) \
        and all(isinstance(d, ast.Constant) for d in arguments.defaults)


def closed_over(site: Site) -> list[ast.Name]:
    """The names a site's mapped function reads from the function that builds it: those of its
    expression (a lambda, a partial's keywords) and, for a def nested there, the names its body
    reads but does not bind."""
    found = []
    if site.function_node is not None and not site.factory and not site.holder:
        found += [n for n in ast.walk(site.function_node) if isinstance(n, ast.Name)]
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
