"""Where module code uses the classes that hold global sites (classes.py finds those sites):
the one module function that creates a class's instances, which the caller analysis then
follows (callers.py), and a use of a class that keeps pmap code faithful, which a global
caller may not make under its mesh (fixpoint.py)."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN, CLASS_HELD
from transforms.global_view.classes import chain_members
from transforms.global_view.sites import PMAP, Blocker, Site, dotted


def class_callers(tree: ast.Module, sites) -> tuple[dict[str, set[str]], dict[str, Blocker]]:
    """Module function -> the held sites it reaches through the instances it creates, and a
    blocker for the sites of each class whose instances are not all created in one module
    function (or whose name is used other than to call it)."""
    by_class: dict[str, list[Site]] = {}
    for site in sites:
        if site.holder:
            by_class.setdefault(site.holder, []).append(site)
    callers, blocked = {}, {}
    for name, held in by_class.items():
        creators, blocker = set(), None
        for statement in tree.body:
            for node in ast.walk(statement):
                if not (isinstance(node, ast.Name) and node.id == name):
                    continue
                if isinstance(statement, ast.ClassDef) and statement.name == name:
                    blocker = Blocker(CLASS_HELD, node,
                                      f"`{name}` refers to itself in its own body "
                                      f"(line {node.lineno}): its instances are not all seen")
                elif not isinstance(statement, ast.FunctionDef):
                    blocker = blocker or Blocker(CLASS_HELD, node,
                                                 f"`{name}` is used at module level "
                                                 f"(line {node.lineno}), outside the module "
                                                 "functions the global style follows")
                else:
                    creators.add(statement.name)
        calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        loose = next((n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
                      and isinstance(n.ctx, ast.Load) and id(n) not in calls), None)
        if loose is not None:
            blocker = blocker or Blocker(CLASS_HELD, loose,
                                         f"the class `{name}` is used other than "
                                         f"called (line {loose.lineno}): its instances or "
                                         "subclasses are not all seen")
        if len(creators) > 1:
            blocker = blocker or Blocker(CLASS_HELD, held[0].node,
                                         f"instances of `{name}` are made in "
                                         f"several functions ({', '.join(sorted(creators))}); "
                                         "the global style follows them in one")
        if not creators:
            blocker = blocker or Blocker(CALLERS_UNSEEN, held[0].node, f"`{name}` is never "
                                         "instantiated in this module, so the layouts its "
                                         "pmaps are called with are unknown")
        for site in held:
            if blocker is not None:
                blocked[site.key] = blocker
            else:
                callers.setdefault(next(iter(creators)), set()).add(site.key)
    return callers, blocked


def faithful_class_use(function: ast.FunctionDef, classes: dict[str, ast.ClassDef], imported,
                       sites, blocked, faithful_callee) -> ast.Name | None:
    """The first use in `function` of a module class that keeps pmap code in the faithful
    style (its own pmaps, or module functions its methods call): that code would run under the
    function's mesh. `classes`: the module's classes by name, as classes.view_of gives them
    (with the code they inherit from bases in the module). `faithful_callee(method)` is
    callers.py's check of a method's calls."""
    held: dict[str, list[Site]] = {}
    for site in sites:
        if site.holder:
            held.setdefault(site.holder, []).append(site)
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                and node.id in classes):
            continue
        cls = classes[node.id]
        global_held = node.id in held and all(s.key not in blocked for s in held[node.id])
        builds = {id(n) for s in held.get(node.id, ()) for n in ast.walk(s.built)} \
            if global_held else set()
        code = [n for member in chain_members(cls) for n in ast.walk(member)]
        if any(dotted(n, imported) == PMAP for n in code
               if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in builds):
            return node
        if any(faithful_callee(m) is not None for m in chain_members(cls)
               if isinstance(m, ast.FunctionDef)):
            return node
    return None
