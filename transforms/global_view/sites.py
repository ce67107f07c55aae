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
_ALLOWED_OPTIONS = {"axis_name", "in_axes", "donate_argnums", "out_axes"}


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
    in_axes: tuple[int | None, ...]  # one per parameter
    donate: str | None  # source text of donate_argnums, or None
    decorated: bool
    out_none: bool = False  # out_axes=None: the original returns the unstacked value
    owner: str | None = None  # the module function a local or inline site is built in
    inline: bool = False  # `jax.pmap(f, ...)(args)`: called where it is built
    function_node: ast.AST | None = None  # assigned / inline: the mapped function expression
    factory: bool = False  # `def name(...): ...; return jax.pmap(...)`, only used as name(...)(x)

    @property
    def label(self) -> str:
        """How findings name the site."""
        if self.factory:
            return f"the jax.pmap(...) `{self.name}` returns (line {self.node.lineno})"
        return f"the jax.pmap(...) called at line {self.node.lineno}" if self.inline else f"`{self.name}`"

    @property
    def key(self) -> str:
        """Unique in the module: a local site is named after the function it is built in."""
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
    constants = _string_constants(tree)
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
    site = _assigned_site(function.name, last.value, function, imported, functions, constants)
    site.factory = True
    return site


def _string_constants(tree: ast.Module) -> dict[str, str]:
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
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and dotted(node.value.func, imported) == PMAP:
            target = node.targets[0] if len(node.targets) == 1 else None
            try:
                if not isinstance(target, ast.Name) or stores.get(target.id) != 1:
                    raise Blocker("PM601", node.value, "pmap assigned to a name bound more than once")
                sites.append(_assigned_site(target.id, node.value, node, imported, functions,
                                            constants, owner=function.name))
            except Blocker as blocker:
                blockers.append(blocker)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Call) \
                and dotted(node.func.func, imported) == PMAP:
            try:
                site = _assigned_site(f"{function.name}:{node.lineno}:{node.col_offset}", node.func,
                                      node, imported, functions, constants, owner=function.name)
                site.inline = True
                sites.append(site)
            except Blocker as blocker:
                blockers.append(blocker)
    return sites, blockers


def _assigned_site(name, call, statement, imported, functions, constants, owner=None) -> Site:
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
                raise Blocker("PM602", keyword.value, "a functools.partial keyword that is not "
                              "a constant or a name")
    else:
        raise Blocker("PM602", call, "the mapped function is not a lambda, a module-level def "
                      "or functools.partial of one with keywords")
    site = _site(name, call, statement, body, positional, keywords, False, constants, bound)
    site.owner, site.function_node = owner, function
    return site


def _site_of(statement, imported, functions, constants) -> Site | None:
    if isinstance(statement, ast.FunctionDef):
        for decorator in statement.decorator_list:
            if _is_pmap_decorator(decorator, imported):
                if len(statement.decorator_list) != 1:
                    raise Blocker("PM602", decorator, "pmap stacked with other decorators")
                options = ([], []) if not isinstance(decorator, ast.Call) else \
                    pmap_call_options(decorator, imported)[1:]
                return _site(statement.name, decorator, statement, statement, *options, True,
                             constants)
        return None
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        found = pmap_call_options(statement.value, imported)
        if found is None or dotted(statement.value.func, imported) != PMAP:
            return None
        if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name):
            raise Blocker("PM601", statement, "pmap assigned to something other than one name")
        return _assigned_site(statement.targets[0].id, statement.value, statement, imported,
                              functions, constants)
    return None


def _is_pmap_decorator(decorator, imported) -> bool:
    if isinstance(decorator, ast.Call):
        return dotted(decorator.func, imported) == PARTIAL and pmap_call_options(
            decorator, imported) is not None
    return dotted(decorator, imported) == PMAP


def _site(name, node, statement, body, positional, keywords, decorated, constants,
          bound=()) -> Site:
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
    if axis is None:
        axis_name = None
    elif isinstance(axis, ast.Constant) and isinstance(axis.value, str):
        axis_name = axis.value
    elif isinstance(axis, ast.Name) and axis.id in constants:
        axis_name = constants[axis.id]
    else:
        raise Blocker("PM602", node, "axis_name is not a string literal or module constant")
    out_axes = options.get("out_axes")
    if out_axes is not None and not (isinstance(out_axes, ast.Constant) and out_axes.value in (0, None)
                                     and type(out_axes.value) is not bool):
        raise Blocker("PM602", node, "out_axes other than 0 or None")
    args = body.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or (
            args.defaults and not bound):
        raise Blocker("PM602", node, "the mapped function has *args, **kwargs, keyword-only "
                      "parameters or defaults")
    params = [a.arg for a in args.args]
    if bound:
        if any(b not in params for b in bound) or params[len(params) - len(bound):] != list(bound):
            raise Blocker("PM602", node, "functools.partial binds parameters other than the last")
        params = params[:len(params) - len(bound)]
        if len(args.defaults) > len(bound):
            raise Blocker("PM602", node, "the mapped function has defaults")
    in_axes = _in_axes(options.get("in_axes"), len(params), node)
    donate = options.get("donate_argnums")
    if donate is not None and not _literal_ints(donate):
        raise Blocker("PM602", node, "donate_argnums is not a literal int or tuple of ints")
    return Site(name, node, statement, body, params, axis_name, in_axes,
                ast.unparse(donate) if donate is not None else None, decorated,
                out_none=isinstance(out_axes, ast.Constant) and out_axes.value is None)


def _in_axes(node, count: int, where) -> tuple[int | None, ...]:
    if node is None:
        return (0,) * count
    if isinstance(node, ast.Constant) and node.value in (0, None) and type(node.value) is not bool:
        return (node.value,) * count
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == count:
        axes = []
        for element in node.elts:
            leaves = _axis_leaves(element)
            if leaves is None or len(set(leaves)) != 1:
                raise Blocker("PM602", where, "in_axes entries other than 0 or None (or a "
                              "tree of one of them)")
            axes.append(leaves[0])
        return tuple(axes)
    raise Blocker("PM602", where, "in_axes is not 0, None or a flat tuple of them")


def _axis_leaves(node) -> list | None:
    """The axes of an in_axes entry: 0 / None, or a dict / tuple / list literal of them."""
    if isinstance(node, ast.Constant):
        ok = node.value in (0, None) and type(node.value) is not bool
        return [node.value] if ok else None
    children = node.values if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if children is None or not children or (isinstance(node, ast.Dict) and None in node.keys):
        return None
    leaves = []
    for child in children:
        found = _axis_leaves(child)
        if found is None:
            return None
        leaves += found
    return leaves


def _literal_ints(node) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    return isinstance(node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)
