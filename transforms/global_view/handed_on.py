"""Callers whose results nobody in the module reads: where a global caller's return values go.

A caller that returns values in the global layout is safe only where no code written for
pmap's layout reads them. Its callers in the module accept them when each call either drops
the result (`main()` as a statement) or returns it unchanged (`def run(): return main()`)
from a function that the module reads nowhere else and no other module uses: that function
then hands the same values, in the same layout, to whoever calls it from outside, as the
caller itself would (fixpoint.py keeps such callers global; rewrite.py gives the layouts of
the caller to those functions, for the equivalence check's entry point).
"""

from __future__ import annotations

import ast

from transforms.global_view.callers import walk_own_scope


def entry_points(tree: ast.Module, name: str, elsewhere, busy=frozenset()
                 ) -> tuple[str, ...] | None:
    """The module functions through which the result of `name` leaves the module, when every
    load of `name` is a call whose result is dropped or returned as is (transitively through
    those functions, none of them read elsewhere); None if some load reads the result.
    `elsewhere(f)`: the other module that uses `f`, or None."""
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, ast.Load)]
    dropped = {id(s.value.func) for s in ast.walk(tree) if isinstance(s, ast.Expr)
               and isinstance(s.value, ast.Call)}
    returned_by = {id(r.value.func): host for host, function in functions.items()
                   for statement in function.body for r in walk_own_scope(statement)
                   if isinstance(r, ast.Return) and isinstance(r.value, ast.Call)}
    entries: list[str] = []
    for load in loads:
        if id(load) in dropped:
            continue
        host = returned_by.get(id(load))
        if host is None or host in busy or host == name \
                or not _returns_only(functions[host], name) or elsewhere(host) is not None:
            return None
        if any(isinstance(n, ast.Name) and n.id == host and isinstance(n.ctx, ast.Load)
               for n in ast.walk(tree)):
            further = entry_points(tree, host, elsewhere, busy | {name})
            if further is None:
                return None
            entries += further
        else:
            entries.append(host)
    return tuple(dict.fromkeys(entries))


def _returns_only(host: ast.FunctionDef, name: str) -> bool:
    """`host` is a plain function (no decorator, no yield) whose every return is
    `return name(...)`: what it returns is exactly what `name` returns."""
    own = [n for statement in host.body for n in walk_own_scope(statement)]
    if host.decorator_list or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await))
                                  for n in own):
        return False
    returns = [n for n in own if isinstance(n, ast.Return)]
    return bool(returns) and all(
        isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name)
        and r.value.func.id == name for r in returns)
