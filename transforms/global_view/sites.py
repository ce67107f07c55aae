"""Which pmap sites of a module the global style can take, read with the standard `ast`.

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

from transforms.codes.global_view import OPTIONS, PMAP_AS_VALUE

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
JIT = "jax.jit"
_ALLOWED_OPTIONS = {"axis_name", "in_axes", "donate_argnums", "out_axes",
                    "static_broadcasted_argnums", "devices", "axis_size"}


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
    axis_name: str | None  # None: no axis_name, so the body names no axis (any mesh axis fits)
    in_axes: tuple  # one per parameter: 0, None, or a dict / tuple tree of them
    donate: str | None  # source text of donate_argnums, or None
    decorated: bool
    out_none: bool = False  # out_axes=None: the original returns the unstacked value
    owner: str | None = None  # the module function a local or inline site is built in
    inline: bool = False  # `jax.pmap(f, ...)(args)`: called where it is built
    function_node: ast.AST | None = None  # assigned / inline: the mapped function expression
    factory: bool = False  # `def name(...): ...; return jax.pmap(...)`, only used as name(...)(x)
    static: tuple[int, ...] = ()  # static_broadcasted_argnums, pmap's numbering
    # devices= / axis_size=: exact only when they are all devices / the device count, which
    # the caller's analysis decides (the expression is evaluated where the site is built)
    placement: dict[str, ast.AST] = dataclasses.field(default_factory=dict)
    # out_axes other than a plain 0 / None: a tuple (0, None, 1, ...) or a dict {"k": 0, ...}
    # with one entry per result, or one int >= 1 for the whole result
    out_tree: tuple | dict | int | None = None
    outer_jit: ast.AST | None = None  # a bare `@jax.jit` right above the pmap decorator
    replaced: ast.AST | None = None  # `jax.jit(jax.pmap(...))`: the jit call the rewrite replaces
    # Held by a class (global_view/classes.py): `self.<attribute> = jax.pmap(...)` in the
    # `__init__` of the module-level class `holder`, or of a factory's returned pmap.
    holder: str | None = None
    attribute: str | None = None
    # Names the body reads that are string constants in its scope (a factory's `axis_name`
    # parameter whose default every call uses), and the function whose nested defs it calls.
    constants: dict[str, str] = dataclasses.field(default_factory=dict)
    enclosing: ast.FunctionDef | None = None
    bound_self: str | None = None  # a bound method `self.m`: the name of its `self` parameter

    @property
    def label(self) -> str:
        """How findings name the site."""
        if self.holder:
            return f"`self.{self.attribute}` of `{self.holder}` (line {self.node.lineno})"
        if self.factory:
            return f"the jax.pmap(...) `{self.name}` returns (line {self.node.lineno})"
        return f"the jax.pmap(...) called at line {self.node.lineno}" if self.inline else f"`{self.name}`"

    @property
    def built(self) -> ast.AST:
        """The expression that builds the pmapped callable (the span the rewrite replaces)."""
        return self.replaced or self.node

    @property
    def key(self) -> str:
        """Unique in the module: a local site is named after the function it is built in."""
        if self.holder:
            return f"{self.holder}.{self.attribute}"
        return self.name if self.owner is None or self.inline else f"{self.owner}.{self.name}"


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
    constants = string_constants(tree)
    factories = _called_on_the_spot(tree)
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and statement.name in factories \
                and not statement.decorator_list:
            try:
                site = _factory_site(statement, imported, functions, constants)
            except Blocker as blocker:
                blockers.append(blocker)
                claimed.update(id(n) for n in ast.walk(blocker.node))
                site = None
            if site is not None:
                sites.append(site)
                claimed.update(id(n) for n in ast.walk(site.node.func))
                continue
        if isinstance(statement, ast.FunctionDef) and not statement.decorator_list:
            local, local_blockers = _local_sites(statement, imported, functions, constants)
            sites += local
            blockers += local_blockers
            for site in local:
                claimed.update(id(n) for n in ast.walk(site.node.func))
            for blocker in local_blockers:
                claimed.update(id(n) for n in ast.walk(blocker.node))
            continue
        try:
            site = _site_of(statement, imported, functions, constants)
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
    from transforms.global_view.classes import find_class_sites  # it builds on this module

    held, held_blockers = find_class_sites(tree, imported, functions, constants, claimed)
    sites += held
    blockers += held_blockers
    for node in ast.walk(tree):
        if id(node) not in claimed and isinstance(node, (ast.Name, ast.Attribute)):
            if dotted(node, imported) == PMAP and isinstance(node.ctx, ast.Load):
                blockers.append(Blocker(PMAP_AS_VALUE, node,
                                        f"this pmap {_unfollowed(node, tree)}: "
                                        "kept in the faithful style"))
                claimed.update(id(n) for n in ast.walk(node))
    return sites, blockers


def _unfollowed(pmap: ast.AST, tree: ast.Module) -> str:
    """Why a pmap reference is none of the shapes the global style follows, in the terms of
    where it stands: used as a value, wrapped in another call, or built in a function or
    class whose result is kept as a value."""
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    parent = parents.get(id(pmap))
    if not (isinstance(parent, ast.Call) and parent.func is pmap):
        return "is used as a value (passed, stored or returned without being called)"
    outer = parents.get(id(parent))
    scope = next((s for s in tree.body if any(n is pmap for n in ast.walk(s))), None)
    if isinstance(outer, ast.Call) and parent in outer.args:
        where = f"wrapped in `{ast.unparse(outer.func)}(...)`"
    elif isinstance(scope, ast.ClassDef):
        return (f"is built in the class `{scope.name}` other than as `self.<name> = "
                "jax.pmap(...)` in its `__init__`")
    elif isinstance(scope, ast.FunctionDef):
        where = f"built in the function `{scope.name}`"
    else:
        return "is built at module level other than as `name = jax.pmap(...)` or a decorator"
    if isinstance(scope, ast.FunctionDef) and isinstance(outer, ast.Return):
        return (f"is returned by `{scope.name}`, whose result is kept as a value rather than "
                f"called on the spot (`{scope.name}(...)(x)`) or held by a class")
    return f"is {where}, and the global style does not follow what is done with it"


def _called_on_the_spot(tree: ast.Module) -> set[str]:
    """Names whose every load is `name(...)(...)`: the result is called where it is made."""
    spot = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call) \
                and isinstance(node.func.func, ast.Name):
            spot.add(id(node.func.func))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) in spot}
    loads_elsewhere = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                       and isinstance(n.ctx, ast.Load) and id(n) not in spot}
    return names - loads_elsewhere


def _factory_site(function: ast.FunctionDef, imported, functions, constants) -> Site | None:
    """`def ring_shift(n): perm = ...; return jax.pmap(lambda x: ..., ...)` whose only pmap is
    the one it returns, called as `ring_shift(n)(x)`: a site whose callers are those calls'
    functions. It closes over the factory's own locals, never over a caller's values."""
    last = function.body[-1] if function.body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Call)
            and dotted(last.value.func, imported) == PMAP):
        return None
    others = [n for n in ast.walk(function) if isinstance(n, (ast.Name, ast.Attribute))
              and dotted(n, imported) == PMAP and n is not last.value.func]
    if others or any(isinstance(n, ast.Return) for s in function.body[:-1] for n in ast.walk(s)):
        return None
    site = assigned_site(function.name, last.value, function, imported, functions, constants)
    site.factory = True
    return site


def string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound once, to a string literal (`AXIS = "batch"`)."""
    bound: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.setdefault(node.id, []).append(node)
    found = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) \
                and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str):
            name = statement.targets[0].id
            if len(bound.get(name, [])) == 1:
                found[name] = statement.value.value
        elif isinstance(statement, ast.ClassDef) and not bound.get(statement.name) \
                and _defined_once(statement.name, tree):
            found.update(_class_constants(statement, tree))
    return found


def _defined_once(name: str, tree: ast.Module) -> bool:
    """`name` is bound by exactly one def / class statement and by no import or parameter."""
    definitions = [n for n in ast.walk(tree) if isinstance(
        n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    imports = [a for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in n.names if (a.asname or a.name.split(".")[0]) == name]
    parameters = [a for a in ast.walk(tree) if isinstance(a, ast.arg) and a.arg == name]
    return len(definitions) == 1 and not imports and not parameters


def _class_constants(cls: ast.ClassDef, tree: ast.Module) -> dict[str, str]:
    """`Cfg.axis` of `class Cfg: axis = "replica"`: a plain class (no decorators, bases or
    metaclass) whose attribute is assigned once in its body and never from outside it (no
    `Cfg.axis = ...`, no setattr / delattr anywhere in the module)."""
    if cls.decorator_list or cls.bases or cls.keywords:
        return {}
    if any(isinstance(n, ast.Name) and n.id in ("setattr", "delattr", "vars")
           for n in ast.walk(tree)):
        return {}
    assigned: dict[str, list] = {}
    for statement in cls.body:
        for target in getattr(statement, "targets", [getattr(statement, "target", None)]):
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, []).append(statement)
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            assigned.setdefault(statement.name, []).append(statement)
    stored_outside = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and not isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
                      and n.value.id == cls.name}
    # Every other use must be `Cfg.attr` or `Cfg(...)`: an alias (`C = Cfg`) could rebind them.
    uses = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    if any(isinstance(n, ast.Name) and n.id == cls.name and id(n) not in uses
           for n in ast.walk(tree)):
        return {}
    found = {}
    for name, statements in assigned.items():
        statement = statements[0]
        if len(statements) == 1 and name not in stored_outside and isinstance(statement, ast.Assign) \
                and len(statement.targets) == 1 and isinstance(statement.value, ast.Constant) \
                and isinstance(statement.value.value, str):
            found[f"{cls.name}.{name}"] = statement.value.value
    return found


def _local_sites(function: ast.FunctionDef, imported, functions, constants):
    """Sites built inside a module-level function: `p = jax.pmap(f, ...)` (p bound once, and
    only called) and `jax.pmap(f, ...)(args)`."""
    sites, blockers = [], []
    stores: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    for node in ast.walk(function):
        pmapped = pmap_call(node.value, imported) if isinstance(node, ast.Assign) else None
        if pmapped is not None:
            target = node.targets[0] if len(node.targets) == 1 else None
            try:
                if not isinstance(target, ast.Name) or stores.get(target.id) != 1:
                    raise Blocker(PMAP_AS_VALUE, pmapped,
                                  "pmap assigned to a name bound more than once")
                site = assigned_site(target.id, pmapped, node, imported, functions,
                                      constants, owner=function.name)
                site.replaced = node.value if node.value is not pmapped else None
                sites.append(site)
            except Blocker as blocker:
                blockers.append(blocker)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Call) \
                and dotted(node.func.func, imported) == PMAP:
            try:
                site = assigned_site(f"{function.name}:{node.lineno}:{node.col_offset}", node.func,
                                      node, imported, functions, constants, owner=function.name)
                if site.static:
                    raise Blocker(OPTIONS, node.func, "static_broadcasted_argnums on a pmap "
                                  "called where it is built: assign it to a name first")
                site.inline = True
                sites.append(site)
            except Blocker as blocker:
                blockers.append(blocker)
    return sites, blockers


def pmap_call(value, imported) -> ast.Call | None:
    """The `jax.pmap(...)` call of `jax.pmap(...)` or of a bare `jax.jit(jax.pmap(...))`."""
    if not isinstance(value, ast.Call):
        return None
    if dotted(value.func, imported) == PMAP:
        return value
    if dotted(value.func, imported) == JIT and len(value.args) == 1 and not value.keywords \
            and isinstance(value.args[0], ast.Call) and dotted(value.args[0].func, imported) == PMAP:
        return value.args[0]
    return None


def assigned_site(name, call, statement, imported, functions, constants, owner=None) -> Site:
    function, positional, keywords = pmap_call_options(call, imported)
    bound = []
    if isinstance(function, ast.Lambda):
        body = function
    elif isinstance(function, ast.Name) and function.id in functions:
        body = functions[function.id]
    elif isinstance(function, ast.Call) and dotted(function.func, imported) == PARTIAL \
            and len(function.args) == 1 and isinstance(function.args[0], ast.Name) \
            and function.args[0].id in functions and all(k.arg for k in function.keywords):
        body = functions[function.args[0].id]
        bound = [k.arg for k in function.keywords]
        for keyword in function.keywords:
            if not isinstance(keyword.value, (ast.Constant, ast.Name, ast.UnaryOp)):
                raise Blocker(OPTIONS, keyword.value, "a functools.partial keyword that is not "
                              "a constant or a name")
    else:
        raise Blocker(OPTIONS, call, "the mapped function is not a lambda, a module-level def "
                      "or functools.partial of one with keywords")
    site = make_site(name, call, statement, body, positional, keywords, False, constants, bound)
    site.owner, site.function_node = owner, function
    return site


def _site_of(statement, imported, functions, constants) -> Site | None:
    if isinstance(statement, ast.FunctionDef):
        decorators = statement.decorator_list
        for index, decorator in enumerate(decorators):
            if _is_pmap_decorator(decorator, imported):
                outer_jit = _stacked_jit(decorators, index, imported)
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
        site = assigned_site(statement.targets[0].id, pmapped, statement, imported,
                              functions, constants)
        site.replaced = statement.value if statement.value is not pmapped else None
        return site
    return None


def _stacked_jit(decorators, index: int, imported) -> ast.AST | None:
    """The bare `@jax.jit` right above the pmap decorator at `index`, if any. Only bare
    `@jax.jit` may be stacked with pmap, above (jit of the new jit is that jit) or below (the
    body is a jitted function, traced inside shard_map as it was inside pmap)."""
    for position, decorator in enumerate(decorators):
        if position != index and _is_pmap_decorator(decorator, imported):
            raise Blocker(OPTIONS, decorators[min(position, index)], "a nested pmap (pmap of "
                          "a pmap): the global style does not build a 2-D mesh for it")
        if position != index and dotted(decorator, imported) != JIT:
            raise Blocker(OPTIONS, decorator, f"pmap stacked with the decorator "
                          f"`{ast.unparse(decorator)}` (only a bare @jax.jit is followed)")
    if index > 1:
        raise Blocker(OPTIONS, decorators[0], "pmap under more than one decorator")
    return decorators[0] if index == 1 else None


def _is_pmap_decorator(decorator, imported) -> bool:
    if isinstance(decorator, ast.Call):
        return dotted(decorator.func, imported) == PARTIAL and pmap_call_options(
            decorator, imported) is not None
    return dotted(decorator, imported) == PMAP


def make_site(name, node, statement, body, positional, keywords, decorated, constants,
          bound=()) -> Site:
    options = {k.arg: k.value for k in keywords}
    if None in options:
        raise Blocker(OPTIONS, node, "pmap options passed with **")
    if positional:
        if len(positional) > 1:
            raise Blocker(OPTIONS, node, "pmap options given positionally beyond axis_name")
        options["axis_name"] = positional[0]
    if "backend" in options:
        raise Blocker(OPTIONS, node, "pmap's backend= picks a platform; the "
                      "global mesh is over the default backend's devices (jax.devices()), "
                      "which may not be that platform")
    unsupported = sorted(set(options) - _ALLOWED_OPTIONS)
    if unsupported:
        raise Blocker(OPTIONS, node, f"pmap option {', '.join(unsupported)} is not supported "
                      "by the global style yet")
    axis = options.get("axis_name")
    if axis is None:
        axis_name = None
    elif isinstance(axis, ast.Constant) and isinstance(axis.value, str):
        axis_name = axis.value
    elif isinstance(axis, (ast.Name, ast.Attribute)) and ast.unparse(axis) in constants:
        axis_name = constants[ast.unparse(axis)]
    else:
        raise Blocker(OPTIONS, node, "axis_name is not a string literal or a module or class "
                      "constant")
    out_axes = options.get("out_axes")
    out_tree = None
    if isinstance(out_axes, ast.Tuple) and out_axes.elts and all(
            _is_axis(e, None) for e in out_axes.elts):
        out_tree = tuple(e.value for e in out_axes.elts)
    elif isinstance(out_axes, ast.Dict) and out_axes.keys and all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in out_axes.keys) \
            and all(_is_axis(v, None) for v in out_axes.values) \
            and len({k.value for k in out_axes.keys}) == len(out_axes.keys):
        out_tree = {k.value: v.value for k, v in zip(out_axes.keys, out_axes.values)}
    elif out_axes is not None and _is_axis(out_axes, None) and out_axes.value not in (0, None):
        out_tree = out_axes.value
    elif out_axes is not None and not _is_zero_or_none(out_axes):
        raise Blocker(OPTIONS, node, "out_axes other than an int, None, or a flat tuple or "
                      "dict of them")
    args = body.args
    signature = [what for what, present in (
        ("*args", args.vararg), ("**kwargs", args.kwarg), ("keyword-only parameters", args.kwonlyargs),
        ("positional-only parameters", args.posonlyargs)) if present]
    if signature:
        raise Blocker(OPTIONS, node, f"the mapped function has {', '.join(signature)}: pmap maps "
                      "them per call, so one in_specs tuple does not describe every call")
    # Defaults are fine: every call must pass every parameter (checked at the calls), so the
    # defaults are never used.
    params = [a.arg for a in args.args]
    if bound:
        if any(b not in params for b in bound) or params[len(params) - len(bound):] != list(bound):
            raise Blocker(OPTIONS, node, "functools.partial binds parameters other than the last")
        params = params[:len(params) - len(bound)]
    in_axes = _in_axes(options.get("in_axes"), len(params), node, body)
    donate = options.get("donate_argnums")
    if donate is not None and not _literal_ints(donate):
        raise Blocker(OPTIONS, node, "donate_argnums is not a literal int or tuple of ints")
    static = _static_argnums(options.get("static_broadcasted_argnums"), len(params), bound, node)
    return Site(name, node, statement, body, params, axis_name, in_axes,
                ast.unparse(donate) if donate is not None else None, decorated,
                out_none=isinstance(out_axes, ast.Constant) and out_axes.value is None,
                static=static, out_tree=out_tree,
                placement={k: options[k] for k in ("devices", "axis_size") if k in options})


def _is_axis(node, limit: int | None = 0) -> bool:
    """A literal None or int axis in 0..limit (limit None: any non-negative int)."""
    return isinstance(node, ast.Constant) and (node.value is None or (
        type(node.value) is int and node.value >= 0 and (limit is None or node.value <= limit)))


def _is_zero_or_none(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, None) and type(node.value) is not bool


def _static_argnums(node, count: int, bound, where) -> tuple[int, ...]:
    """pmap's static_broadcasted_argnums as sorted positions (they become jit's static_argnums
    with the same numbering)."""
    if node is None:
        return ()
    if not _literal_ints(node):
        raise Blocker(OPTIONS, where, "static_broadcasted_argnums is not a literal int or "
                      "tuple of ints")
    values = [node.value] if isinstance(node, ast.Constant) else [e.value for e in node.elts]
    if bound or any(not 0 <= v < count for v in values) or len(set(values)) != len(values):
        raise Blocker(OPTIONS, where, "static_broadcasted_argnums outside the mapped function's "
                      "parameters (negative, repeated, or with functools.partial keywords)")
    if len(values) == count:
        raise Blocker(OPTIONS, where, "every argument is static: pmap maps nothing")
    return tuple(sorted(values))


def _in_axes(node, count: int, where, body) -> tuple:
    """One entry per parameter: 0 / None, an int k >= 1 (a def body only: the rewrite
    squeezes that axis in the body's first statement), or a dict / tuple tree of 0 / None."""
    if node is None:
        return (0,) * count
    if _is_axis(node, None):
        axes = (node.value,) * count
    elif isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == count:
        axes = tuple(e.value if _is_axis(e, None) else _tree_entry(e, where) for e in node.elts)
    else:
        raise Blocker(OPTIONS, where, "in_axes is not an int, None or a tuple of them (or of "
                      "trees of 0 and None)")
    if any(type(a) is int and a >= 1 for a in axes) and isinstance(body, ast.Lambda):
        raise Blocker(OPTIONS, where, "in_axes other than 0 on a lambda: the slice pmap hands "
                      "the body has no size-1 axis, and a lambda has no statement to drop it in")
    return axes


def _tree_entry(element, where):
    """An in_axes entry that is a dict / tuple tree of 0 and None (collapsed when uniform)."""
    tree = _axis_tree(element)
    if tree is _INVALID:
        raise Blocker(OPTIONS, where, "in_axes entries other than an int, None, or a dict / "
                      "tuple tree of 0 and None")
    leaves = _tree_leaves(tree)
    return leaves[0] if len(set(leaves)) == 1 else tree


_INVALID = object()


def _axis_tree(node):
    """An in_axes entry as data: 0 / None, or a dict (string keys) / tuple of such entries."""
    if isinstance(node, ast.Constant):
        return node.value if _is_zero_or_none(node) else _INVALID
    if isinstance(node, ast.Dict):
        if not node.keys or not all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                    for k in node.keys):
            return _INVALID
        children = {k.value: _axis_tree(v) for k, v in zip(node.keys, node.values)}
        if len(children) != len(node.keys) or _INVALID in children.values():
            return _INVALID
        return children
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        children = tuple(_axis_tree(e) for e in node.elts)
        return _INVALID if _INVALID in children else children
    return _INVALID


def _tree_leaves(tree) -> list:
    if isinstance(tree, dict):
        return [leaf for child in tree.values() for leaf in _tree_leaves(child)]
    if isinstance(tree, tuple):
        return [leaf for child in tree for leaf in _tree_leaves(child)]
    return [tree]


def _literal_ints(node) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    return isinstance(node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
