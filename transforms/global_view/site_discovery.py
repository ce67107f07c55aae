"""Which pmap sites of a module the global style can take (`find_sites`), read with `ast`.

A site qualifies when it is a module-level `def` decorated with `jax.pmap` or
`functools.partial(jax.pmap, ...)` (a bare `@jax.jit` may sit above or below it: jit of
jit is jit), or a `name = jax.pmap(fn, ...)` (or `jax.jit(jax.pmap(fn, ...))`) of a lambda or
a module-level function, with a literal string `axis_name` (or a module / class constant),
`in_axes` of 0 / None per argument (or trees of one of them), `out_axes` 0 / None or a tuple
of them, literal `donate_argnums` and `static_broadcasted_argnums`. Anything else is a
`Blocker` the report names.
"""

from __future__ import annotations

import ast
import dataclasses
import functools

from transforms.codes.global_view import OPTIONS, PMAP_AS_VALUE
from transforms.global_view.callers import top_level_function, walk_own_scope
from transforms.global_view.classes import find_class_sites
from transforms.global_view.method_locals import method_callers
from transforms.global_view.site_options import (
    assigned_site,
    constant_defaults_left,
    make_site,
    string_constants,
)
from transforms.global_view.sites import (
    JIT,
    PARTIAL,
    PMAP,
    Blocker,
    Site,
    dotted,
    keeps_behaviour,
    pmap_call,
    pmap_call_options,
)


def find_sites(tree: ast.Module, imported: dict[str, str], top_level: bool = False
               ) -> tuple[list[Site], list[Blocker]]:
    """The qualifying sites, and a blocker for every other pmap reference in the module.
    `top_level`: the module's top-level code is read as a caller (callers.py), so a pmap
    called where it is built there (`jax.pmap(f)(x)`) is a site of that code."""
    sites, blockers, claimed = [], [], set()
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    constants = string_constants(tree)
    uses = _factory_uses(tree)
    held = {n.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            for n in ast.walk(c) if isinstance(n, ast.Name)}  # names classes read
    loads: dict[str, list[ast.Name]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, []).append(node)
    inline = _top_level_inline_sites(tree, imported, functions, constants) if top_level else []
    module_calls = functools.cache(lambda: _name_calls(tree))  # walked once, when needed
    sites += inline
    spotted = {id(site.statement) for site in inline}  # `jax.pmap(f)(x)`, claimed below
    for site in inline:
        claimed.update(id(n) for n in ast.walk(site.node.func))
    for index, statement in enumerate(tree.body):
        if not isinstance(statement, ast.FunctionDef) and any(
                id(n) in spotted for n in ast.walk(statement)) and not any(
                dotted(n, imported) == PMAP and id(n) not in claimed for n in ast.walk(statement)
                if isinstance(n, (ast.Name, ast.Attribute))):
            continue  # top-level code whose every pmap is called where it is built
        if isinstance(statement, ast.FunctionDef) and keeps_behaviour(statement, imported) \
                and _returned_pmap(statement, imported, functions) is not None:
            # A function never read here is called, if at all, from another module: as a
            # factory its site names that module's use (callers.used_in_other_modules) or
            # its lack of callers.
            defaults = _defaults_never_passed(statement, tree)
            try:
                site = _factory_site(statement, imported, functions, {**constants, **defaults})
                misuse = None if site is None else _misused(
                    statement.name, site.returned, loads.get(statement.name, []), uses)
                if misuse is not None and statement.name in held:
                    site = None  # `self.step = make_step(...)`: classes.py reads it
                elif misuse is not None:
                    raise Blocker(PMAP_AS_VALUE, site.node, f"this pmap {misuse}: kept in the "
                                  "faithful style", covers=site.node)
                if site is not None and site.closure_call is not None \
                        and len(loads.get(site.closure_call.func.id, [])) != 1:
                    # the rewrite may edit the closure's def, which its other uses would see
                    raise Blocker(PMAP_AS_VALUE, site.node, _factory_read_elsewhere(
                        statement.name, site.closure_call, site.enclosing), covers=site.node)
                if site is not None:
                    site.constants = defaults  # the body reads them too (`pmean(g, axis_name)`)
            except Blocker as blocker:
                blockers.append(blocker)
                claimed.update(_claimed_by(blocker))
                site = None
            if site is not None:
                sites.append(site)
                claimed.update(id(n) for n in ast.walk(site.node.func))
                continue
        if isinstance(statement, ast.FunctionDef) and keeps_behaviour(statement, imported):
            local, local_blockers = _local_sites(statement, imported, functions, constants,
                                                 _read_once(functions, loads))
            sites += local
            blockers += local_blockers
            for site in local:
                claimed.update(id(n) for n in ast.walk(site.node if site.decorated
                                                        else site.node.func))
            for blocker in local_blockers:
                claimed.update(_claimed_by(blocker))
            continue
        try:
            site = _site_of(statement, imported, functions, constants,
                            _nearest_first(tree.body, index), tree, module_calls)
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
    for caller in method_callers(tree).values():  # a method's own pmaps: its locals
        local, local_blockers = _local_sites(caller, imported, functions, constants)
        for site in local:
            if _kept_in_method(caller, site.inline or site.name):
                sites.append(site)
                claimed.update(id(n) for n in ast.walk(site.node if site.decorated
                                                        else site.node.func))
        for blocker in local_blockers:  # a local that does not qualify: its own reason
            name = _local_name(caller, blocker.covers or blocker.node)
            if name is not None and _kept_in_method(caller, name):
                blockers.append(blocker)
                claimed.update(_claimed_by(blocker))
    held, held_blockers = find_class_sites(tree, imported, functions, constants, claimed)
    sites += held
    blockers += held_blockers
    places = _Places(tree)
    for node in ast.walk(tree):
        if id(node) not in claimed and isinstance(node, (ast.Name, ast.Attribute)):
            if dotted(node, imported) == PMAP and isinstance(node.ctx, ast.Load):
                blockers.append(Blocker(PMAP_AS_VALUE, node,
                                        f"this pmap {_unfollowed(node, places)}: "
                                        "kept in the faithful style"))
                claimed.update(id(n) for n in ast.walk(node))
    return sites, blockers


def covering(blocker: Blocker, pmap: ast.AST) -> Blocker:
    """`blocker` as the reason `pmap` is no site (its `covers`)."""
    return dataclasses.replace(blocker, covers=pmap)


def _claimed_by(blocker: Blocker) -> set[int]:
    """Ids of the nodes a site's blocker accounts for: its own node and the pmap it covers."""
    nodes = [blocker.node] + ([blocker.covers] if blocker.covers is not None else [])
    return {id(n) for node in nodes for n in ast.walk(node)}


def _top_level_inline_sites(tree: ast.Module, imported, functions, constants) -> list[Site]:
    """The sites of the module's top-level code, the caller `callers.top_level_function`
    reads, outside any def, lambda or class there: `jax.pmap(f)(x)`, and `p = jax.pmap(f)`
    inside a compound statement (a `try:`, an `if`, a loop: a module statement of its own is
    `_site_of`'s) where `p` is bound once in the module and read only by that code, as a
    function's local site is read only by its function."""
    code = top_level_function(tree, ())
    if code is None:
        return []
    nested = {id(n) for statement in code.body for scope in ast.walk(statement)
              if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                    ast.ClassDef))
              for n in ast.walk(scope) if n is not scope}
    own = {id(n) for statement in code.body for n in walk_own_scope(statement)}
    elsewhere = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in own}
    elsewhere |= {n.name for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    statements = {id(statement) for statement in tree.body}
    loads = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    read_once = frozenset(name for name in functions if loads.count(name) == 1)
    return [site for site in _local_sites(code, imported, functions, constants, read_once)[0]
            if id(site.statement) not in nested and (
                site.inline or (not site.decorated and id(site.statement) not in statements
                                and site.name not in elsewhere))]


def _nearest_first(body: list[ast.stmt], index: int):
    """The statements before `body[index]`, nearest first, read only as far as needed."""
    return (body[i] for i in range(index - 1, -1, -1))


class _Places:
    """Each node's parent and the module statement it stands in, mapped on first use and
    once per module (a module may hold thousands of unfollowed pmaps)."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self._parents: dict[int, ast.AST] | None = None
        self._statements: dict[int, ast.stmt] = {}

    def parent(self, node: ast.AST) -> ast.AST | None:
        if self._parents is None:
            self._parents = {id(child): parent for parent in ast.walk(self.tree)
                             for child in ast.iter_child_nodes(parent)}
            self._statements = {id(n): statement for statement in self.tree.body
                                for n in ast.walk(statement)}
        return self._parents.get(id(node))

    def statement(self, node: ast.AST) -> ast.stmt | None:
        self.parent(node)
        return self._statements.get(id(node))


def _unfollowed(pmap: ast.AST, places: _Places) -> str:
    """Why a pmap reference is none of the shapes the global style follows, in the terms of
    where it stands: used as a value, wrapped in another call, or built in a function or
    class whose result is kept as a value."""
    parent = places.parent(pmap)
    scope = places.statement(pmap)
    decorated = _decorated_by(pmap, places)
    if decorated is not None and isinstance(scope, ast.FunctionDef) and scope is not decorated:
        if scope.decorator_list:
            return (f"decorates `{decorated.name}` in `{scope.name}`, itself decorated "
                    f"(`@{ast.unparse(scope.decorator_list[0])}`, line "
                    f"{scope.decorator_list[0].lineno})")
        return (f"decorates `{decorated.name}`, a def in `{scope.name}`, and the global style "
                "does not follow what is done with it")
    if not (isinstance(parent, ast.Call) and parent.func is pmap):
        return "is used as a value (passed, stored or returned without being called)"
    outer = places.parent(parent)
    if isinstance(outer, ast.Call) and parent in outer.args:
        where = f"wrapped in `{ast.unparse(outer.func)}(...)`"
    elif isinstance(outer, ast.IfExp) and isinstance(scope, ast.FunctionDef):
        other = outer.orelse if outer.body is parent else outer.body
        inner = _innermost_def(outer, places)
        nested = f"`{inner.name}` (in `{scope.name}`)" \
            if inner is not None and inner is not scope else f"`{scope.name}`"
        where = f"one branch of a conditional (the other: `{_short(other)}`) in {nested}"
    elif isinstance(scope, ast.ClassDef):
        return (f"is built in the class `{scope.name}` other than as `self.<name> = "
                "jax.pmap(...)` in its `__init__`")
    elif isinstance(scope, ast.FunctionDef):
        where = f"built in the function `{scope.name}`"
    else:
        return "is built at module level other than as `name = jax.pmap(...)` or a decorator"
    if isinstance(scope, ast.FunctionDef) and isinstance(outer, ast.Return):
        return (f"is returned by `{scope.name}`, whose result is kept as a value rather than "
                f"called on the spot (`{scope.name}(...)(x)`), bound to a name that is only "
                "called, or held by a class")
    return f"is {where}, which the global style does not follow"


def _innermost_def(node: ast.AST, places: _Places) -> ast.FunctionDef | None:
    """The def whose body `node` stands in, nearest first."""
    current = places.parent(node)
    while current is not None and not isinstance(current, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef)):
        current = places.parent(current)
    return current


def _short(node: ast.AST, limit: int = 30) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _decorated_by(pmap: ast.AST, places: _Places) -> ast.FunctionDef | None:
    """The def that `pmap` decorates, as `@jax.pmap` or `@functools.partial(jax.pmap, ...)`."""
    parent = places.parent(pmap)
    if isinstance(parent, ast.Call) and pmap in parent.args:
        decorator, parent = parent, places.parent(parent)
    else:
        decorator = pmap
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) \
            and any(d is decorator for d in parent.decorator_list):
        return parent
    return None


def _factory_uses(tree: ast.Module) -> dict[int, object]:
    """id of a name's load -> how a factory's result is used there: "spot" (`name(...)(...)`),
    "stored" (`made = name(...)`, `made` bound once in its function and only ever called), or
    (positions, length) for `a, b = name(...)`: the positions of the tuple's names bound once
    and only called, and the tuple's length. Any other load is absent."""
    uses: dict[int, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call) \
                and isinstance(node.func.func, ast.Name):
            uses[id(node.func.func)] = "spot"
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            uses.update({id(call.func): "stored"
                         for call in stored_factory_calls(function).values()})
            for call, index, length in unpacked_factory_calls(function).values():
                positions, _ = uses.setdefault(id(call.func), (set(), length))
                positions.add(index)
    return uses


def _misused(name: str, returned: tuple[int, int] | None, loads: list[ast.Name],
             uses: dict[int, object]) -> str | None:
    """Why the result of `name`, a function returning its pmap (alone, or in a tuple at
    `returned`), is not only called, naming the first load that shows it; None where every
    load is a call whose result is: called on the spot or stored in a name only called
    (alone), unpacked with the pmap's position a name only called (in a tuple)."""
    for load in sorted(loads, key=lambda n: (n.lineno, n.col_offset)):
        use = uses.get(id(load))
        if returned is None and use in ("spot", "stored"):
            continue
        if returned is not None and isinstance(use, tuple) and returned[0] in use[0] \
                and use[1] == returned[1]:
            continue
        if returned is None:
            return (f"is returned by `{name}`, and line {load.lineno} keeps its result other "
                    f"than called on the spot (`{name}(...)(x)`) or bound to a name that is "
                    "only called")
        return (f"is returned by `{name}` at position {returned[0]} of a tuple, and line "
                f"{load.lineno} does not unpack that tuple into names (`a, b = {name}(...)`) "
                f"with the one at position {returned[0]} only called")
    return None


def _returned_pmap(function: ast.FunctionDef, imported, functions=None):
    """The pmap call `function` returns in its last statement, and its (index, length) in the
    tuple returned, or None alone: `return jax.pmap(...)`, or `return step` / `return step,
    lr` where `step = jax.pmap(...)` is a statement of its body and the only binding and the
    only other read of `step` in it; given the module's `functions`, also `step` a factory's
    closure mapped in place (`step = make(...)`, `step = jax.pmap(step, ...)`: the returned
    value is still only that pmap). None if it returns no such pmap."""
    last = function.body[-1] if function.body else None
    if not isinstance(last, ast.Return) or last.value is None:
        return None
    value = last.value
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    if any(isinstance(e, ast.Starred) for e in elements):
        return None
    position = (lambda i: (i, len(elements))) if isinstance(value, ast.Tuple) else (lambda i: None)
    bindings = {s.targets[0].id: s.value for s in function.body
                if isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)}
    for index, element in enumerate(elements):
        if isinstance(element, ast.Call) and dotted(element.func, imported) == PMAP:
            return element, position(index)
        bound = bindings.get(element.id) if isinstance(element, ast.Name) else None
        if isinstance(bound, ast.Call) and dotted(bound.func, imported) == PMAP:
            names = [n for n in ast.walk(function) if isinstance(n, ast.Name)
                     and n.id == element.id]
            named = [n for n in ast.walk(function) if isinstance(n, ast.arg) and n.arg == element.id
                     or isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == element.id]
            if len(names) == 2 and not named:  # `step = ...` and `return step`
                return bound, position(index)
            if len(names) == 4 and not named and functions and _returned_closure(
                    function, element.id, imported, functions) is not None:
                return bound, position(index)  # `step = make(...)`, `step = jax.pmap(step)`
    return None


def _returned_closure(function: ast.FunctionDef, name: str, imported, functions):
    """(the def, its factory, the call) where `function` maps a factory's closure and
    returns it: `name = make(...)`, `name = jax.pmap(name, ...)` in its own body
    (`_factory_closures`), `name` read nowhere else but in `return name`; else None.
    `functions`: the module's functions."""
    stores: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stores[node.id] = stores.get(node.id, 0) + 1
    return _factory_closures(function, imported, stores, functions).get(name)


def _factory_site(function: ast.FunctionDef, imported, functions, constants) -> Site | None:
    """`def ring_shift(n): perm = ...; return jax.pmap(lambda x: ..., ...)` whose only pmap is
    the one it returns (alone or in a tuple, directly or by the name it is bound to), called as
    `ring_shift(n)(x)`, or stored (`shift = ring_shift(n)`, `shift, perm = ...`) in a name
    only called: a site whose callers are those calls' functions. It closes over the factory's
    own locals, never over a caller's values."""
    returned = _returned_pmap(function, imported, functions)
    if returned is None:
        return None
    pmapped, position = returned
    mapped = pmapped.args[0] if pmapped.args else None
    closure = _returned_closure(function, mapped.id, imported, functions) \
        if isinstance(mapped, ast.Name) else None
    others = [n for n in ast.walk(function) if isinstance(n, (ast.Name, ast.Attribute))
              and dotted(n, imported) == PMAP and n is not pmapped.func]
    if others or any(isinstance(n, ast.Return) for s in function.body[:-1]
                     for n in walk_own_scope(s)):
        return None  # an early return (a nested def's own returns are its own)
    # the mapped function may be a def nested in the factory, bound once there (a closure)
    stores = [n.id for n in ast.walk(function) if isinstance(n, ast.Name)
              and not isinstance(n.ctx, ast.Load)]
    nested = [n for n in ast.walk(function) if isinstance(n, ast.FunctionDef)
              and n is not function]
    functions = {**functions, **{n.name: n for n in nested if not n.decorator_list
                                 and n.name not in stores
                                 and sum(m.name == n.name for m in nested) == 1}}
    if closure is not None:
        functions[mapped.id] = closure[0]
    try:
        site = assigned_site(function.name, pmapped, function, imported, functions, constants)
    except Blocker as blocker:
        raise covering(blocker, pmapped) from None
    if closure is not None:
        site.enclosing, site.closure_call = closure[1], closure[2]
    if site.static:  # their jitted def would take the factory's own name and place
        raise Blocker(OPTIONS, pmapped, "static_broadcasted_argnums on a pmap a factory "
                      "returns: its jitted step is not written inside the factory yet",
                      covers=pmapped)
    site.factory, site.returned = True, position
    return site


def _defaults_never_passed(function: ast.FunctionDef, tree: ast.Module) -> dict[str, str]:
    """The parameters of `function` with a string default that no call of it passes (by
    position or keyword, and no call spreads `*args` / `**kwargs`): constants, as a module
    constant is (`def make_step(lr, axis_name="batch")`)."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == function.name]
    return {name: value for name, value in constant_defaults_left(function, calls).items()
            if isinstance(value, str)}


def stored_factory_calls(function: ast.FunctionDef, unpacked: bool = False) -> dict:
    """`made = name(...)` statements of `function`'s own body whose target is bound nowhere
    else in it and read only as the function of calls (`made(x)`): target -> the call. A
    function result used this way is a pmap factory's result called later (site_discovery's
    factories, call_kinds.py)."""
    stores: dict[str, int] = {}
    loads: dict[str, list[ast.Name]] = {}
    called = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.setdefault(node.id, []).append(node)
            else:
                stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node is not function:
            stores[node.name] = stores.get(node.name, 0) + 2
        elif isinstance(node, ast.arg):
            stores[node.arg] = stores.get(node.arg, 0) + 2
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                stores[name] = stores.get(name, 0) + 2
        if isinstance(node, ast.Call):
            called.add(id(node.func))
    only_called = {name for name, uses in loads.items() if stores.get(name) == 1
                   and all(id(use) in called for use in uses)}
    found = {}
    for statement in function.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.value, ast.Call) \
                and isinstance(statement.value.func, ast.Name):
            target = statement.targets[0]
            if not unpacked and isinstance(target, ast.Name) and target.id in only_called:
                found[target.id] = statement.value
            elif unpacked and isinstance(target, ast.Tuple) \
                    and all(isinstance(e, ast.Name) for e in target.elts):
                found.update({e.id: (statement.value, index, len(target.elts))
                              for index, e in enumerate(target.elts) if e.id in only_called})
    return found


def unpacked_factory_calls(function: ast.FunctionDef) -> dict[str, tuple[ast.Call, int, int]]:
    """`a, b = name(...)` statements of `function`'s own body (plain names only): each name
    bound nowhere else in it and read only as the function of calls -> (the call, its position
    in the tuple, the tuple's length). A factory that returns its pmap in a tuple is called
    this way (site_discovery's factories, dataflow.py)."""
    return stored_factory_calls(function, unpacked=True)


def _local_sites(function: ast.FunctionDef, imported, functions, constants,
                 read_once: frozenset[str] = frozenset()):
    """Sites built inside a module-level function: `p = jax.pmap(f, ...)` (p bound once, and
    only called) and `jax.pmap(f, ...)(args)`, with f a lambda, a module-level def or a def
    nested in the function (a closure), or the nested def a module function returns
    (`_factory_closures`), and nested defs decorated with pmap. `read_once`: the module
    functions whose name the module reads once."""
    sites, blockers = [], []
    stores: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node is not function:
            stores[node.name] = stores.get(node.name, 0) + 1
    # Defs nested in the function, bound once there: a pmap may map them by name.
    nested = {n.name: n for n in ast.walk(function) if isinstance(n, ast.FunctionDef)
              and n is not function and stores.get(n.name) == 1 and not n.decorator_list}
    # `share = lambda v: ...` read only where it is mapped: its body is the site's to edit.
    loads = [n.id for n in ast.walk(function) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)]
    nested.update({n.targets[0].id: n.value for n in ast.walk(function)
                   if isinstance(n, ast.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Lambda)
                   and stores.get(n.targets[0].id) == 1 and loads.count(n.targets[0].id) == 1})
    # `check = functools.partial(f, axis_name="i")` read only where it is mapped: that partial.
    partials = {n.targets[0].id: n.value for n in ast.walk(function)
                if isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)
                and dotted(n.value.func, imported) == PARTIAL
                and stores.get(n.targets[0].id) == 1 and loads.count(n.targets[0].id) == 1}
    rebound = _rebound_defs(function, imported, stores)
    nested.update({k: v for k, v in rebound.items() if not isinstance(v, int)})
    closures = _factory_closures(function, imported, stores, functions)
    nested.update({k: v[0] for k, v in closures.items()})
    functions = {**functions, **nested}
    name_calls = functools.cache(lambda: _name_calls(function))  # walked once, when needed
    for node in ast.walk(function):
        if isinstance(node, ast.FunctionDef) and node is not function \
                and any(_is_pmap_decorator(d, imported) for d in node.decorator_list):
            try:
                if stores.get(node.name) != 1:
                    raise Blocker(PMAP_AS_VALUE, node.decorator_list[0],
                                  "a pmapped def whose name is bound more than once")
                site = _site_of(node, imported, functions, constants)
                site.owner = function.name
                sites.append(site)
            except Blocker as blocker:
                blockers.append(covering(blocker, next(d for d in node.decorator_list
                                                       if _is_pmap_decorator(d, imported))))
            continue
        pmapped = pmap_call(node.value, imported) if isinstance(node, ast.Assign) else None
        if pmapped is not None:
            target = node.targets[0] if len(node.targets) == 1 else None
            try:
                if isinstance(target, ast.Name) and isinstance(rebound.get(target.id), int):
                    raise Blocker(PMAP_AS_VALUE, pmapped,
                                  f"`{target.id}` is rebound to its own pmap, but read before "
                                  f"that (line {rebound[target.id]}), where it is the plain def")
                if not isinstance(target, ast.Name) or (
                        stores.get(target.id) != 1 and target.id not in rebound
                        and target.id not in closures):
                    raise Blocker(PMAP_AS_VALUE, pmapped,
                                  _bound_more_than_once(function, node, pmapped))
                closure = closures.get(target.id)
                if closure is not None and closure[1].name not in read_once:
                    raise Blocker(PMAP_AS_VALUE, pmapped, _factory_read_elsewhere(
                        target.id, closure[2], closure[1]))
                site = assigned_site(target.id, pmapped, node, imported, functions,
                                     constants, owner=function.name,
                                     arity=_call_arity(name_calls().get(target.id, [])),
                                     call_keywords=_call_keywords(
                                         name_calls().get(target.id, [])), aliases=partials)
                site.replaced = node.value if node.value is not pmapped else None
                site.rebinds = rebound.get(target.id)  # a def rebound to it (read only by it)
                if closure is not None:
                    if site.static:  # the jitted def `learn` would read itself as the closure
                        raise Blocker(OPTIONS, pmapped, "static_broadcasted_argnums on the "
                                      f"pmap of a factory's def (`{target.id}`)")
                    site.enclosing, site.closure_call = closure[1], closure[2]
                sites.append(site)
            except Blocker as blocker:
                blockers.append(covering(blocker, pmapped))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Call) \
                and dotted(node.func.func, imported) == PMAP:
            try:
                arity = None if node.keywords or any(
                    isinstance(a, ast.Starred) for a in node.args) else len(node.args)
                site = assigned_site(f"{function.name}:{node.lineno}:{node.col_offset}", node.func,
                                     node, imported, functions, constants, owner=function.name,
                                     arity=arity, aliases=partials)
                if site.static:
                    raise Blocker(OPTIONS, node.func, "static_broadcasted_argnums on a pmap "
                                  "called where it is built: assign it to a name first")
                site.inline = True
                sites.append(site)
            except Blocker as blocker:
                blockers.append(covering(blocker, node.func))
    return sites, blockers


def _kept_in_method(method: ast.FunctionDef, name: str | bool) -> bool:
    """A method's local site only: called where it is built (`name` True), or its name read
    in the method only as the callee of a call (never stored on `self`, returned or passed
    on)."""
    if name is True:
        return True
    calls = {id(n.func) for n in ast.walk(method) if isinstance(n, ast.Call)}
    return all(id(n) in calls for n in ast.walk(method) if isinstance(n, ast.Name)
               and n.id == name and isinstance(n.ctx, ast.Load))


def _local_name(method: ast.FunctionDef, pmap: ast.AST) -> str | None:
    """The local name `name = <pmap>` binds in `method` (None: built otherwise)."""
    return next((s.targets[0].id for s in ast.walk(method) if isinstance(s, ast.Assign)
                 and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                 and any(n is pmap for n in ast.walk(s.value))), None)


def _read_once(functions: dict[str, ast.FunctionDef], loads: dict[str, list]) -> frozenset[str]:
    """The module functions whose name the module reads exactly once."""
    return frozenset(name for name in functions if len(loads.get(name, ())) == 1)


def _factory_closures(function: ast.FunctionDef, imported, stores, functions
                      ) -> dict[str, tuple[ast.FunctionDef, ast.FunctionDef, ast.Call]]:
    """A function value is a value: `learn = get_learner_fn(env, config)` then
    `learn = jax.pmap(learn, ...)`, both statements of `function`'s body and the only
    bindings of `learn`, read nowhere in between, where `get_learner_fn` is a module function
    returning one of its nested defs (`_returned_nested_def`): that def, with the call's
    arguments bound (a closure), is the mapped function. name -> (the def, the factory, the
    call)."""
    found = {}
    body = function.body
    for index, statement in enumerate(body):
        pmapped = pmap_call(statement.value, imported) if isinstance(statement, ast.Assign) \
            else None
        if pmapped is None or len(statement.targets) != 1 \
                or not isinstance(statement.targets[0], ast.Name) or not pmapped.args:
            continue
        name, mapped = statement.targets[0].id, pmapped.args[0]
        if not (isinstance(mapped, ast.Name) and mapped.id == name) or stores.get(name) != 2:
            continue
        made = next((i for i in range(index - 1, -1, -1) if isinstance(body[i], ast.Assign)
                     and len(body[i].targets) == 1 and isinstance(body[i].targets[0], ast.Name)
                     and body[i].targets[0].id == name), None)
        call = body[made].value if made is not None else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id in functions):
            continue
        between = [n for s in body[made:index + 1] for n in ast.walk(s)
                   if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                   and n is not mapped]
        factory = functions[call.func.id]
        returned = _returned_nested_def(factory, imported)
        if returned is not None and not between:
            found[name] = (returned, factory, call)
    return found


def _returned_nested_def(factory: ast.FunctionDef, imported) -> ast.FunctionDef | None:
    """The undecorated def of `factory`'s own body that its last statement, `return name`,
    returns, when that is its only return (no early return, no yield) and `name` is bound by
    that def only: what every call of `factory` yields, closing over the call's arguments."""
    last = factory.body[-1] if factory.body else None
    if not keeps_behaviour(factory, imported) or not isinstance(last, ast.Return) \
            or not isinstance(last.value, ast.Name):
        return None
    name = last.value.id
    own = [n for s in factory.body[:-1] for n in walk_own_scope(s)]
    if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)) for n in own):
        return None
    bindings = [n for n in ast.walk(factory) if isinstance(n, ast.Name) and n.id == name
                and not isinstance(n.ctx, ast.Load)]
    bindings += [n for n in ast.walk(factory) if isinstance(n, ast.arg) and n.arg == name
                 or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == name and n is not factory]
    bindings += [n for n in ast.walk(factory) if isinstance(n, (ast.Global, ast.Nonlocal))
                 and name in n.names]
    definition = next((s for s in factory.body if isinstance(s, ast.FunctionDef)
                       and s.name == name), None)
    if definition is None or definition.decorator_list or bindings != [definition]:
        return None
    return definition


def _last_returned(function: ast.FunctionDef) -> str:
    """The name `function`'s last statement returns (`return name`)."""
    return function.body[-1].value.id


def _factory_read_elsewhere(name: str, call: ast.Call, factory: ast.FunctionDef) -> str:
    """Why the pmap of a factory's returned def stays faithful when the module reads the
    factory elsewhere too."""
    return (f"`{name}` maps the def `{factory.name}` returns (line {call.lineno}), and "
            f"`{factory.name}` is also read elsewhere")


def _bound_more_than_once(function: ast.FunctionDef, statement: ast.Assign,
                          pmapped: ast.Call) -> str:
    """Why `name = jax.pmap(...)` in `function` is no site, where `name` has other bindings:
    a rebinding that maps the name's own earlier value (`learn = make_learner(...)` then
    `learn = jax.pmap(learn, ...)`) is named with that value and its line."""
    target = statement.targets[0]
    if not isinstance(target, ast.Name):
        return "pmap assigned to something other than one name"
    mapped = pmapped.args[0] if pmapped.args else None
    earlier = [n for n in ast.walk(function) if isinstance(n, ast.Assign)
               and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
               and n.targets[0].id == target.id and n.lineno < statement.lineno]
    if isinstance(mapped, ast.Name) and mapped.id == target.id and earlier:
        value = max(earlier, key=lambda n: n.lineno).value
        what = f"`{ast.unparse(value.func)}(...)`, a call's result" \
            if isinstance(value, ast.Call) else f"`{ast.unparse(value)}`"
        return (f"`{target.id}` is rebound to the pmap of its earlier value, {what} "
                f"(line {value.lineno}), whose body is not read")
    return "pmap assigned to a name bound more than once"


def _rebound_defs(function: ast.FunctionDef, imported, stores) -> dict[str, ast.FunctionDef | int]:
    """Nested defs rebound to their own pmap, `def step(...): ...` then
    `step = jax.pmap(step, ...)`, both statements of the function's body and the name bound by
    those two only: the def, which is the mapped function as under a pmap decorator when the
    name is read only after the rebinding (so every call is a call of the pmap); else the
    line of the first read before it."""
    found = {}
    body = function.body
    for index, statement in enumerate(body):
        pmapped = pmap_call(statement.value, imported) if isinstance(statement, ast.Assign) \
            else None
        if pmapped is None or pmapped is not statement.value or len(statement.targets) != 1 \
                or not isinstance(statement.targets[0], ast.Name) or not pmapped.args:
            continue
        name, mapped = statement.targets[0].id, pmapped.args[0]
        definition = next((s for s in body[:index] if isinstance(s, ast.FunctionDef)
                           and s.name == name and not s.decorator_list), None)
        if definition is None or stores.get(name) != 2 \
                or not (isinstance(mapped, ast.Name) and mapped.id == name):
            continue
        early = [n for s in body[:index + 1] for n in ast.walk(s)
                 if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                 and n is not mapped]
        found[name] = early[0].lineno if early else definition
    return found


def _site_of(statement, imported, functions, constants, earlier=(), tree=None,
             module_calls=None) -> Site | None:
    """The site of a module statement: a pmap-decorated def, or `name = jax.pmap(f, ...)`.
    `tree`, `module_calls`: the module and its `_name_calls`, so that a module-level name only
    ever called, always with the same number of positional arguments, may map a function `f`
    whose body is not read (a bound method `pipeline._generate`) as a local site may
    (`assigned_site`'s `arity`), where `f` reads the same object at every trace."""
    if isinstance(statement, ast.FunctionDef):
        decorators = statement.decorator_list
        for index, decorator in enumerate(decorators):
            if _is_pmap_decorator(decorator, imported):
                outer_jit = _stacked_jit(decorators, index, imported, functions)
                options = ([], []) if not isinstance(decorator, ast.Call) else \
                    pmap_call_options(decorator, imported)[1:]
                site = make_site(statement.name, decorator, statement, statement, *options, True,
                                 constants)
                if outer_jit is not None and (site.donate or site.static):
                    raise Blocker(OPTIONS, outer_jit, "a jax.jit above a pmap with "
                                  "donate_argnums or static_broadcasted_argnums")
                site.outer_jit = outer_jit
                return site
        return None
    if isinstance(statement, ast.Assign):
        pmapped = pmap_call(statement.value, imported)
        if pmapped is None:
            return None
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            raise Blocker(PMAP_AS_VALUE, statement,
                          "pmap assigned to something other than one name")
        target = statement.targets[0].id
        rebinds = None
        if any(isinstance(n, ast.Name) and n.id == target for n in ast.walk(pmapped)):
            # `step = jax.pmap(step)`: the wrapper `def step` must not shadow the def it maps
            rebinds = _rebound_at_module_level(statement, pmapped, earlier)
            if rebinds is None:
                raise Blocker(PMAP_AS_VALUE, pmapped,
                              f"`{target}` is rebound at module level to a pmap of itself, "
                              "other than right after its plain def as `name = "
                              "jax.pmap(name, ...)`")
        mapped = pmapped.args[0] if pmapped.args else None
        opaque = isinstance(mapped, ast.Attribute) or (
            isinstance(mapped, ast.Name) and mapped.id not in functions)
        arity = _call_arity(module_calls().get(target, [])) \
            if tree is not None and rebinds is None and opaque \
            and _same_at_every_read(mapped, tree) else None
        site = assigned_site(statement.targets[0].id, pmapped, statement, imported,
                             functions, constants, arity=arity)
        site.replaced = statement.value if statement.value is not pmapped else None
        site.rebinds = rebinds
        return site
    return None


def _same_at_every_read(function: ast.AST, tree: ast.Module) -> bool:
    """`name` or `name.a.b` whose name is bound once in the module and whose attributes are
    never assigned (no `x.a = ...`, no setattr): read when a migrated module-level step is
    traced, it gives what pmap read once where it was built (`pmap(pipeline._generate)`)."""
    chain = function
    attributes = set()
    while isinstance(chain, ast.Attribute):
        attributes.add(chain.attr)
        chain = chain.value
    if not isinstance(chain, ast.Name):
        return False
    root = chain.id
    bindings = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == root and not isinstance(node.ctx, ast.Load):
            bindings += 1
        elif isinstance(node, ast.arg) and node.arg == root or isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == root:
            bindings += 2
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and root in node.names:
            bindings += 2
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == root for a in node.names):
            bindings += 2
        elif isinstance(node, ast.Attribute) and node.attr in attributes \
                and not isinstance(node.ctx, ast.Load):
            return False
        elif isinstance(node, ast.Name) and node.id in ("setattr", "delattr", "vars"):
            return False
    return bindings == 1


def _rebound_at_module_level(statement: ast.Assign, pmapped: ast.Call, earlier):
    """The undecorated module-level def that `name = jax.pmap(name, ...)` (the statement that
    evaluates `pmapped`) rebinds, when only other plain defs and imports stand between the two,
    so nothing runs the plain def first; None otherwise. `earlier`: the module statements
    before it, nearest first."""
    name = statement.targets[0].id
    mapped = pmapped.args[0] if pmapped.args else None
    if statement.value is not pmapped or not (isinstance(mapped, ast.Name) and mapped.id == name) \
            or any(isinstance(n, ast.Name) and n.id == name and n is not mapped
                   for n in ast.walk(pmapped)):
        return None
    for before in earlier:
        if isinstance(before, ast.FunctionDef) and before.name == name:
            return before if not before.decorator_list else None
        if not (isinstance(before, (ast.Import, ast.ImportFrom)) or (
                isinstance(before, ast.FunctionDef) and not before.decorator_list)):
            return None
    return None


def _stacked_jit(decorators, index: int, imported, functions=None) -> ast.AST | None:
    """The bare `@jax.jit` right above the pmap decorator at `index`, if any. Only bare
    `@jax.jit` may be stacked with pmap, above (jit of the new jit is that jit) or below (the
    body is a jitted function, traced inside shard_map as it was inside pmap). `functions`:
    the defs in scope, so that a decorator defined in the module is named with what it does."""
    for position, decorator in enumerate(decorators):
        if position != index and _is_pmap_decorator(decorator, imported):
            raise Blocker(OPTIONS, decorators[min(position, index)], "a nested pmap (pmap of "
                          "a pmap): the global style does not build a 2-D mesh for it")
        if position != index and dotted(decorator, imported) != JIT:
            own = (functions or {}).get(decorator.id) if isinstance(decorator, ast.Name) \
                else None
            what = "(only a bare @jax.jit is followed)" if not isinstance(
                own, ast.FunctionDef) else f"(line {own.lineno}), {_what_decorator_does(own)}"
            raise Blocker(OPTIONS, decorator, f"pmap stacked with the decorator "
                          f"`{ast.unparse(decorator)}` {what}")
    if index > 1:
        raise Blocker(OPTIONS, decorators[0], "pmap under more than one decorator")
    return decorators[0] if index == 1 else None


def _what_decorator_does(decorator: ast.FunctionDef) -> str:
    """How a decorator of the module wraps what it decorates, for the finding that keeps a
    pmap under it: a wrapper that only returns the wrapped function's call on its own
    parameters passes the pmap's calls through; any other code in it is named by its line."""
    parameters = [a.arg for a in decorator.args.args]
    wrapper = decorator.body[0] if decorator.body else None
    last = decorator.body[-1] if decorator.body else None
    if len(parameters) != 1 or len(decorator.body) != 2 \
            or not isinstance(wrapper, ast.FunctionDef) or not isinstance(last, ast.Return) \
            or not (isinstance(last.value, ast.Name) and last.value.id == wrapper.name):
        return "which does more than return a wrapper of what it decorates"
    statement = wrapper.body[0]
    passed = [a.arg for a in wrapper.args.args]
    call = statement.value if isinstance(statement, ast.Return) else None
    if len(wrapper.body) == 1 and isinstance(call, ast.Call) \
            and isinstance(call.func, ast.Name) and call.func.id == parameters[0] \
            and [ast.unparse(a) for a in call.args] == passed and not call.keywords:
        return f"whose wrapper `{wrapper.name}` only passes the calls through (not followed yet)"
    first = next((s for s in wrapper.body if not (
        isinstance(s, ast.Return) and isinstance(s.value, ast.Call))), wrapper.body[0])
    return f"whose wrapper `{wrapper.name}` runs code besides the call (line {first.lineno})"


def _is_pmap_decorator(decorator, imported) -> bool:
    if isinstance(decorator, ast.Call):
        return dotted(decorator.func, imported) == PARTIAL and pmap_call_options(
            decorator, imported) is not None
    return dotted(decorator, imported) == PMAP


def _name_calls(function: ast.FunctionDef) -> dict[str, list[ast.Call | None]]:
    """Each name `function` loads -> for each load, the call it is the callee of (None where
    it is not called). One walk for all the sites a function binds: the top level of a
    generated module binds thousands, and a walk per site was quadratic."""
    calls = {id(n.func): n for n in ast.walk(function) if isinstance(n, ast.Call)}
    uses: dict[str, list[ast.Call | None]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, []).append(calls.get(id(node)))
    return uses


def _call_keywords(uses: list[ast.Call | None]) -> tuple[str, ...]:
    """The keyword names every call `name(...)` passes (`uses`: `_name_calls`' for the name),
    when every use is such a call and all pass the same ones (no `**`); () otherwise."""
    found = set()
    for call in uses:
        if call is None or any(k.arg is None for k in call.keywords):
            return ()
        found.add(tuple(sorted(k.arg for k in call.keywords)))
    return found.pop() if len(found) == 1 else ()


def _call_arity(uses: list[ast.Call | None]) -> int | None:
    """How many positional arguments every use passes (`uses`: `_name_calls`' for the name),
    when each is a call `name(a, b, ...)` (no keywords, no *args); None otherwise."""
    counts = set()
    for call in uses:
        if call is None or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        counts.add(len(call.args))
    return counts.pop() if len(counts) == 1 else None
