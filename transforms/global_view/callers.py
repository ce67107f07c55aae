"""Caller discovery: which module-level functions call which global sites, and which pmap
references cannot be followed to their callers (PM603). Sites and callers fall back together,
so the fixpoint (fixpoint.py) also asks here whether a caller reaches code that stays
faithful."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN
from transforms.global_view.class_uses import class_callers
from transforms.global_view.sites import Blocker, Site, dotted


# The module's top-level code read as one function (`top_level_function`): a caller like any
# other, by a name no def can have.
MODULE_CALLER = "<module>"

# Why a site with no caller in its module is blocked: the one reason a use in another module
# of the run says better (`used_in_other_modules`). Where no module of the run uses it either,
# nothing the user gave calls it: passing the module that calls it is what would help.
NO_CALLER_HERE = "has no caller in the paths given"


def callers_by_site(callers: dict[str, set[str]]) -> dict[str, list[str]]:
    """Site key -> the functions that call it, in `callers` order: one pass over the callers
    for all sites, rather than a scan of every caller per site."""
    by_site: dict[str, list[str]] = {}
    for caller, called in callers.items():
        for site in called:
            by_site.setdefault(site, []).append(caller)
    return by_site


def caller_label(caller: str) -> str:
    return "top-level code" if caller == MODULE_CALLER else caller


def top_level_function(tree: ast.Module, sites) -> ast.FunctionDef | None:
    """The statements that run when the module runs (a script's top level, an `if __name__
    == "__main__":` block, a notebook's cells), less its defs, classes, imports and the sites'
    own statements, as the body of one function. A site called there has a caller the
    analysis reads like any other; None where there is no such code."""
    own = {id(s.statement) for s in sites}
    body = [s for s in tree.body
            if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                  ast.Import, ast.ImportFrom)) and id(s) not in own
            and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body:
        return None
    arguments = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                              kw_defaults=[], kwarg=None, defaults=[])
    function = ast.FunctionDef(name=MODULE_CALLER, args=arguments, body=body,
                               decorator_list=[], returns=None, type_comment=None)
    function.lineno, function.col_offset = body[0].lineno, body[0].col_offset
    function.end_lineno, function.end_col_offset = body[-1].end_lineno, body[-1].end_col_offset
    return function


def mark_reads_before_binding(tree: ast.Module, sites) -> None:
    """Top-level code runs in order (a script's statements, a notebook's cells): a read of a
    module-level site's name in a statement above the one that binds the site runs before
    the site exists, so it means the name's earlier binding (the plain def a later cell
    rebinds to a pmap), not the site. Sets each such site's `read_before` to those reads;
    reads inside defs, lambdas and classes run when they are called and are left alone."""
    position = {id(statement): index for index, statement in enumerate(tree.body)}
    reads: dict[str, list[tuple[int, int]]] | None = None  # name -> (statement index, id)
    for site in sites:
        index = position.get(id(site.statement))
        if index is None or site.owner is not None or site.holder or site.inline:
            continue
        if reads is None:  # one walk of the top level, not one per site (quadratic)
            reads = _top_level_reads(tree)
        site.read_before = frozenset(
            node for at, node in reads.get(site.name, ()) if at < index)


def _top_level_reads(tree: ast.Module) -> dict[str, list[tuple[int, int]]]:
    """Each name read by the module's top-level code outside defs, lambdas and classes ->
    (index of its module statement, id of the read)."""
    reads: dict[str, list[tuple[int, int]]] = {}
    for index, statement in enumerate(tree.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in walk_own_scope(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                reads.setdefault(node.id, []).append((index, id(node)))
    return reads


def walk_own_scope(node):
    """`ast.walk` that does not enter defs, lambdas or classes (their statements run
    elsewhere), though it yields those nodes themselves."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        if not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                    ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(current))


def find_callers(tree: ast.Module, sites: dict[str, Site], faithful: dict[str, Blocker],
                 top_level: ast.FunctionDef | None = None):
    """Module-level function -> the sites it calls; sites referenced any other way blocked.
    `faithful`: module-level pmap names that stay faithful; their callers stay faithful too.
    `top_level`: the module's top-level code as a function (`top_level_function`), whose
    references to sites make it their caller."""
    code = {id(s) for s in top_level.body} if top_level is not None else set()
    callers: dict[str, set[str]] = {}
    blocked: dict[str, Blocker] = dict(faithful)
    for site in sites.values():
        if site.owner is not None:
            callers.setdefault(site.owner, set()).add(site.key)
    module_sites = {s.name: s for s in sites.values() if s.owner is None and not s.holder}
    held_callers, held_blocked = class_callers(tree, sites.values())
    for caller, held in held_callers.items():
        callers.setdefault(caller, set()).update(held)
    blocked.update({k: b for k, b in held_blocked.items() if k not in blocked})
    sites = module_sites
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and node.id in faithful:
                    callers.setdefault(statement.name, set()).add(node.id)
    defined_by: dict[int, Site] = {}  # statement id -> the first site it defines
    for site in sites.values():
        defined_by.setdefault(id(site.statement), site)
    for statement in tree.body:
        site_here = defined_by.get(id(statement))
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Name) and node.id in sites) \
                    or id(node) in sites[node.id].read_before:
                continue  # not a site's name, or read before the site is bound
            name = node.id
            if site_here is not None and site_here.name == name and (
                    isinstance(node.ctx, ast.Store) or inside(node, site_here.statement)):
                continue  # the site's own definition
            if isinstance(statement, ast.FunctionDef) and site_here is None \
                    and isinstance(node.ctx, ast.Load) and not _binds(statement, name):
                callers.setdefault(statement.name, set()).add(name)
            elif id(statement) in code and isinstance(node.ctx, ast.Load) \
                    and not _binds(top_level, name):
                callers.setdefault(MODULE_CALLER, set()).add(name)
            elif name not in blocked:
                blocked[name] = Blocker(CALLERS_UNSEEN, node, f"`{name}` is referenced outside a "
                                        "module-level function (or rebound): not every caller "
                                        "can be followed")
    for name, blocker in _rebinding_blockers(tree, sites).items():
        blocked.setdefault(name, blocker)
    for name, site in sites.items():
        if name not in blocked and not any(name in c for c in callers.values()):
            blocked[name] = Blocker(CALLERS_UNSEEN, site.node, f"`{name}` {NO_CALLER_HERE}, "
                                    "so the layouts of its arguments are unknown")
    return callers, blocked


def _rebinding_blockers(tree: ast.Module, sites: dict[str, Site]) -> dict[str, Blocker]:
    """Module-level sites whose name another module-level statement binds too (a def, a
    class, an import, an assignment; not the def a `step = jax.pmap(step)` rewrite renames):
    below the site, the reads after it mean that binding; above it, a function that reads
    the name may be called before the site is bound and then calls the earlier binding,
    which reads the caller's values as they were (top-level reads above the site are
    `Site.read_before`, resolved in order)."""
    inside_scopes = {n.id for scope in ast.walk(tree)
                     if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                           ast.ClassDef))
                     for n in ast.walk(scope) if n is not scope and isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Load)}
    found = {}
    for name, site in sites.items():
        index = next((i for i, s in enumerate(tree.body) if s is site.statement), None)
        if index is None:
            continue
        for position, statement in enumerate(tree.body):
            binding = next((n for n in walk_own_scope(statement)
                            if n is not site.statement and n is not site.rebinds
                            and _binds_name(n, name)), None)
            if binding is None or position == index:
                continue
            if position > index:
                found[name] = Blocker(CALLERS_UNSEEN, binding, f"`{name}` is bound again at "
                                      f"line {binding.lineno}, below the pmap: the reads after "
                                      "that mean the new binding")
            elif name in inside_scopes:
                found[name] = Blocker(CALLERS_UNSEEN, site.node, f"`{name}` is bound at line "
                                      f"{binding.lineno} too, above the pmap, and a function "
                                      "reads it: called before the pmap is bound, it would call "
                                      "that earlier binding (not every caller can be followed)")
            if name in found:
                break
    return found


def _binds_name(node: ast.AST, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Name):
        return node.id == name and not isinstance(node.ctx, ast.Load)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    return False


def used_in_other_modules(module, sites, blocked: dict[str, Blocker]) -> dict[str, Blocker]:
    """Module-level sites another module of the run calls (by the site's name, its factory's
    or its holder class's): callers this module's analysis cannot see, so each keeps the
    calling contract they rely on (PM603), named in place of having no caller in the paths
    given. Also a local site mapping the def a module function returns, where another module
    uses that function."""
    found = {}
    for site in sites:
        if site.closure_call is not None and site.key not in blocked:
            # the rewrite may edit the body of the factory's def, which those uses would see
            factory = site.closure_call.func.id
            if (where := module.elsewhere(factory)) is not None:
                found[site.key] = Blocker(CALLERS_UNSEEN, site.node,
                                          f"`{site.name}` maps the def `{factory}` returns, "
                                          f"which another module uses ({where}) and would see "
                                          "edited")
            if not site.factory or site.key in found:
                continue  # a factory returning the pmap of a closure: its callers elsewhere too
        if (site.key in blocked and NO_CALLER_HERE not in blocked[site.key].message) \
                or (site.owner is not None and not site.factory):
            continue
        name = site.holder or site.name  # a factory site is named after its factory
        where = module.elsewhere(name)
        if where is not None and name in module.refused:
            found[site.key] = Blocker(CALLERS_UNSEEN, site.node,
                                      f"`{name}` is called from another module whose calls "
                                      f"cannot go global ({module.refused[name]})")
        elif where is not None:
            found[site.key] = Blocker(CALLERS_UNSEEN, site.node,
                                      f"`{name}` is used by another module ({where})")
    return found


def fold_callers(tree: ast.Module, sites: dict[str, Site], callers: dict[str, set[str]],
                 kept: frozenset[str] = frozenset(),
                 top_level: ast.FunctionDef | None = None,
                 returning: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """Callers read inside the callers that call them: a module function with parameters that
    calls module sites (flax imagenet's `sync_batch_stats(state)`, a pmapped mean of
    `state.batch_stats`) and is used only by calls from other callers, which follow it as a
    helper given their values (call_kinds.py). Alone its parameters would be unknown; so its
    sites join each calling caller's, and it is no caller of its own. Returns the folded
    functions with their sites (`callers` is updated in place). `kept`: functions to leave
    callers of their own (the fixpoint's second try, fixpoint.py). `top_level`: the module's
    top-level code as a function (`top_level_function`), a host like any caller (a notebook's
    `accuracy = get_accuracy(params_repl)`). `returning`: functions that, as callers of their
    own, return global values to their hosts: folded into hosts that call no site too, which
    then read what they return (fixpoint.py)."""
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    if top_level is not None:
        functions[MODULE_CALLER] = top_level
    enclosing = {id(n): name for name, f in functions.items() for n in ast.walk(f)}
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    loads: dict[str, list[ast.Name]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, []).append(node)

    def foldable(name: str, called: set[str]) -> bool:
        function = functions.get(name)
        return function is not None and name not in kept and bool(loads.get(name)) \
            and not function.decorator_list \
            and bool(function.args.args or function.args.kwonlyargs) \
            and all(k in sites and sites[k].owner in (None, name) and not sites[k].holder
                    and not sites[k].donate and not sites[k].factory for k in called) \
            and all(id(use) in calls for use in loads[name])

    def own_names(name: str) -> set[str]:  # the sites it builds, called by these names
        return {sites[k].name for k in callers[name] if sites[k].owner == name
                and not sites[k].inline}

    candidates = {name for name, called in callers.items() if foldable(name, called)}

    def hosts_of(name: str) -> list[str | None]:
        return [enclosing.get(id(use)) for use in loads[name]]

    def may_fold(name: str) -> bool:
        """What one candidate alone asks of its hosts (chains aside)."""
        hosts = hosts_of(name)
        if any(host is None or host in kept for host in hosts):
            return False  # a use outside module functions
        if any(host not in callers for host in hosts) \
                and not _feeds_its_sites(functions[name], {sites[k].name for k in callers[name]}) \
                and name not in returning:
            return False  # alone it knows what its sites get: the caller it is stays one
        return not any(isinstance(n, ast.Name) and n.id in own_names(name)
                       for host in set(hosts) for n in ast.walk(functions[host]))
        # (a host's own name would be read as the site it builds)

    able = {name for name in candidates if may_fold(name)}
    folding_hosts = {name: {h for h in hosts_of(name) if h in able} for name in able}

    def above(name: str) -> set[str]:  # the folding functions it is read in, transitively
        found, stack = set(), list(folding_hosts[name])
        while stack:
            host = stack.pop()
            if host not in found:
                found.add(host)
                stack.extend(folding_hosts[host])
        return found

    # Recursion among them: none of those folds (whose body would be read in which?).
    able -= {name for name in able if name in above(name)}
    # A chain folds from the inside out (`sync_batch_stats` into `train_and_evaluate`, that
    # into `run`): each one's sites join its hosts' before those are folded in turn.
    order = sorted(able, key=lambda name: (-len(above(name) & able), name))
    folded: dict[str, set[str]] = {}
    for name in order:
        hosts = hosts_of(name)
        folded[name] = callers.pop(name)
        for host in set(hosts):  # a function that calls it is a caller of its sites
            callers[host] = callers.get(host, set()) | folded[name]
    return folded


def _feeds_its_sites(function: ast.FunctionDef, names: set[str]) -> bool:
    """Some parameter of `function` is read in an argument of a call of one of its sites
    (`names`): what those sites are given comes from its callers."""
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args,
                                  *function.args.kwonlyargs)}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in names:
            arguments = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(n, ast.Name) and n.id in parameters
                   for argument in arguments for n in ast.walk(argument)):
                return True
    return False


def faithful_callee(function, functions, callers, blocked_callers, imported, seen,
                    barrier_pmaps=frozenset()):
    """The first call in `function` of a module function that (itself or through its own
    calls) mentions jax.pmap without being a caller of sites: pmap code the analysis did not
    read. A caller whose sites keep pmap's calling contract (`blocked_callers`) is not one:
    its contract code builds its own mesh (no mesh context is ever set) and takes the values
    pmap took, which a global caller hands it unchanged (a changed value passed to a
    function the analysis does not follow is refused). `barrier_pmaps`: ids of the pmaps of
    host barriers, which the faithful rules remove."""
    seen.add(function.name)
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                and node.id in functions and node.id not in seen):  # seen: global sites too
            continue
        callee = functions[node.id]
        mentions_pmap = any(dotted(n, imported) == "jax.pmap" for n in ast.walk(callee)
                            if isinstance(n, (ast.Name, ast.Attribute))
                            and id(n) not in barrier_pmaps)
        if mentions_pmap and node.id not in callers:
            return node
        if faithful_callee(callee, functions, callers, blocked_callers, imported, seen,
                           barrier_pmaps):
            return node
    return None


def _binds(function: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
               for n in ast.walk(function)) or any(a.arg == name for a in ast.walk(function.args)
                                                   if isinstance(a, ast.arg))


def called_function_names(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
    # A function's own definition does not load its name; any load is a use.
    return names


def inside(node, statement) -> bool:
    return any(child is node for child in ast.walk(statement))
