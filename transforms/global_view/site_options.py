"""A global site's options, read with `ast`: axis_name (a literal or a module / class string
constant), in_axes, out_axes, donate_argnums, static_broadcasted_argnums, devices= and
axis_size=, and the mapped function's signature. What the global style cannot take is a PM602
`Blocker` naming the option."""

from __future__ import annotations

import ast

from transforms.codes.global_view import OPTIONS
from transforms.global_view.sites import PARTIAL, Blocker, Site, dotted, pmap_call_options
from transforms.reading.pmap_options import is_axis, literal_argnums, read_axes, string_keyed

_ALLOWED_OPTIONS = {"axis_name", "in_axes", "donate_argnums", "out_axes",
                    "static_broadcasted_argnums", "devices", "axis_size"}


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


def assigned_site(name, call, statement, imported, functions, constants, owner=None,
                  arity: int | None = None, call_keywords: tuple[str, ...] = (),
                  aliases: dict[str, ast.Call] | None = None) -> Site:
    """The site of `name = jax.pmap(f, ...)` (module-level, local, inline or a factory's): `f`
    is a lambda, a module-level def, or functools.partial of one with keywords. `arity`: the
    number of positional arguments every call passes (an inline site, or a local name only
    called); with it, any other function `f` (its body not read) of a pmap without options
    gets the stand-in body of `opaque_lambda`. `call_keywords`: the keyword names every call
    passes (a partial's parameters after its bound ones). `aliases`: local names bound once
    to `functools.partial(...)` and read only where they are mapped (`check = partial(f,
    axis_name="i")` then `jax.pmap(check, ...)`): the name maps that partial, built once where
    it is bound, as pmap's own partial argument is built once where pmap is called."""
    function, positional, keywords = pmap_call_options(call, imported)
    bound, opaque = [], False
    named = function if isinstance(function, ast.Name) and function.id in (aliases or {}) \
        else None
    if named is not None:
        function = aliases[named.id]
    if isinstance(function, ast.Lambda):
        body = function
    elif isinstance(function, ast.Name) and function.id in functions:
        body = functions[function.id]
    elif isinstance(function, ast.Call) and dotted(function.func, imported) == PARTIAL \
            and function.args and isinstance(function.args[0], ast.Name) \
            and function.args[0].id in functions and all(k.arg for k in function.keywords):
        body = functions[function.args[0].id]
        # `partial(train_step, config, learning_rate_fn)` binds the first parameters
        leading = [a.arg for a in body.args.args][:len(function.args) - 1]
        bound = leading + [k.arg for k in function.keywords]
        for value in [*function.args[1:], *(k.value for k in function.keywords)]:
            if not _read_once_where_built(value):
                raise Blocker(OPTIONS, value, f"a functools.partial argument "
                              f"(`{ast.unparse(value)}`) that binds a name or yields where "
                              "the partial is built")
        if len(leading) < len(function.args) - 1 or isinstance(function.args[-1], ast.Starred):
            raise Blocker(OPTIONS, function, "functools.partial binds more positional "
                          "arguments than the mapped function has parameters")
    elif arity is not None and function is not None and not positional and not call.keywords \
            and not isinstance(function, ast.Starred):
        body, opaque = opaque_lambda(function, arity), True
    else:
        raise Blocker(OPTIONS, call, "the mapped function is not a lambda, a module-level def "
                      "or functools.partial of one with keywords")
    site = make_site(name, call, statement, body, positional, keywords, False, constants, bound,
                     call_keywords if bound else ())
    if named is not None and (site.static or site.keyword_params):
        raise Blocker(OPTIONS, named, f"`{named.id}`, a functools.partial bound to a name, is "
                      "mapped with static_broadcasted_argnums or called with keywords: its "
                      "jitted def would write the partial's call out, and the name holds it")
    site.owner, site.function_node = owner, named if named is not None else function
    site.opaque = opaque
    return site


def _read_once_where_built(node: ast.AST) -> bool:
    """A partial's argument is evaluated once, where the partial is built (`config.x`,
    `model.get_metrics_fn("train")`), and so is the global site's: hoist.py does not move such
    a site to module level, and where the site becomes a jitted def (static arguments,
    keyword calls), which reads its names at each trace, the value is bound to a name where
    the site was built (site_edits._arguments_read_once). Not an expression that binds a name
    in the function (`:=`) or suspends it (`yield`, `await`), which that binding would move."""
    return not any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await,
                                  ast.Starred)) for n in ast.walk(node))


def opaque_lambda(function: ast.AST, arity: int) -> ast.Lambda:
    """`lambda _x0, ..., _xk: function(_x0, ..., _xk)`, every node at `function`'s place in
    the source (so its span, and the text the rewrite copies, is `function`'s). Only for a
    pmap without options: it names no axis, so `function` uses no collective over it."""
    names = [ast.Name(f"_x{i}", ast.Load()) for i in range(arity)]
    parameters = [ast.arg(name.id) for name in names]
    call = ast.Call(func=function, args=names, keywords=[])
    body = ast.Lambda(args=ast.arguments(posonlyargs=[], args=parameters, kwonlyargs=[],
                                         kw_defaults=[], defaults=[]), body=call)
    for node in (body, call, *names, *parameters):
        ast.copy_location(node, function)
        node.end_lineno, node.end_col_offset = function.end_lineno, function.end_col_offset
    return body


def make_site(name, node, statement, body, positional, keywords, decorated, constants,
              bound=(), call_keywords=()) -> Site:
    """A `Site` from pmap's options over the mapped function `body`; an option the global
    style cannot take raises a PM602 `Blocker` that names it."""
    options = {k.arg: k.value for k in keywords}
    if None in options:
        raise Blocker(OPTIONS, node, "pmap options passed with **")
    if positional:
        if len(positional) > 1:
            raise Blocker(OPTIONS, node, "pmap options given positionally beyond axis_name")
        options["axis_name"] = positional[0]
    if "backend" in options:
        raise Blocker(OPTIONS, node, "pmap's backend= picks a platform the global mesh "
                      "(jax.devices()) may not be on")
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
    out_read = read_axes(out_axes, "out_axes") if out_axes is not None else 0
    out_tree = None
    if isinstance(out_read, tuple) and out_read and all(is_axis(e) for e in out_read):
        out_tree = out_read
    elif string_keyed(out_read) and all(is_axis(v) for v in string_keyed(out_read).values()):
        out_tree = string_keyed(out_read)
    elif type(out_read) is int and out_read != 0:
        out_tree = out_read
    elif out_read not in (0, None):
        raise Blocker(OPTIONS, node, "out_axes other than an int, None, or a flat tuple or "
                      "dict of them")
    args = body.args
    signature = [what for what, present in (
        ("*args", args.vararg), ("**kwargs", args.kwarg),
        # a partial's keyword binds a keyword-only parameter once for every call
        ("keyword-only parameters", [a for a in args.kwonlyargs if a.arg not in bound]),
        ("positional-only parameters", args.posonlyargs)) if present]
    if signature:
        raise Blocker(OPTIONS, node, f"the mapped function has {', '.join(signature)}: pmap maps "
                      "them per call, so one in_specs tuple does not describe every call")
    # Defaults are fine: every call must pass every parameter (checked at the calls), so the
    # defaults are never used.
    params = [a.arg for a in args.args]
    by_keyword: list[str] = []
    if bound:
        keyword_only = {a.arg for a in args.kwonlyargs}
        params, by_keyword = _unbound_params(params, [b for b in bound if b not in keyword_only],
                                             args, node, call_keywords)
    in_axes = _in_axes(options.get("in_axes"), len(params), node, body) + (0,) * len(by_keyword)
    if by_keyword and options.get("static_broadcasted_argnums") is not None:
        raise Blocker(OPTIONS, node, "static_broadcasted_argnums on a pmap called with keywords")
    donate = options.get("donate_argnums")
    if donate is not None and literal_argnums(donate) is None:
        raise Blocker(OPTIONS, node, "donate_argnums is not a literal int or tuple of ints")
    static = _static_argnums(options.get("static_broadcasted_argnums"), len(params), node)
    return Site(name, node, statement, body, params + by_keyword, axis_name, in_axes,
                ast.unparse(donate) if donate is not None else None, decorated,
                out_none=isinstance(out_axes, ast.Constant) and out_axes.value is None,
                static=static, out_tree=out_tree,
                placement={k: options[k] for k in ("devices", "axis_size") if k in options},
                keyword_params=tuple(by_keyword))


def _unbound_params(params: list[str], bound: list[str], args: ast.arguments, where,
                    call_keywords=()) -> tuple[list[str], list[str]]:
    """(the parameters a call of `functools.partial(f, *leading, k=...)` fills by position,
    those its calls pass by keyword). By position: those after the leading ones and before the
    first bound keyword; a call passing more would fill a bound parameter twice (a TypeError
    in the original). Each parameter after the first bound keyword is bound, keeps its
    default, or is in `call_keywords`, the names every call passes (flax's
    `partial(train_step, config=..., learning_rate_fn=...)` over `train_step(state, batch,
    config, learning_rate_fn, label_smoothing=0.0, dropout_rng=None)`, called with
    `dropout_rng=rngs`)."""
    if len(set(bound)) != len(bound) or any(b not in params for b in bound):
        raise Blocker(OPTIONS, where, "functools.partial binds a parameter twice, or a keyword "
                      "that is not a parameter of the mapped function")
    defaulted = params[len(params) - len(args.defaults):] if args.defaults else []
    free = [p for p in params if p not in bound]
    first = min((params.index(b) for b in bound if params.index(b) >= params.index(free[0])),
                default=len(params)) if free else len(params)
    after = [p for p in params[first:] if p not in bound]
    stray = [k for k in call_keywords if k not in after]
    if stray:
        raise Blocker(OPTIONS, where, f"calls pass `{stray[0]}` by keyword, which is not a "
                      "parameter after the functools.partial's bound ones")
    unpassed = [p for p in after if p not in defaulted and p not in call_keywords]
    if unpassed:
        raise Blocker(OPTIONS, where, f"functools.partial binds parameters before "
                      f"`{unpassed[0]}`, which has no default, and not every call passes it by "
                      "keyword")
    return [p for p in params[:first] if p not in bound], [p for p in after if p in call_keywords]


def _static_argnums(node, count: int, where) -> tuple[int, ...]:
    """pmap's static_broadcasted_argnums as sorted positions (they become jit's static_argnums
    with the same numbering)."""
    if node is None:
        return ()
    values = literal_argnums(node)
    if values is None:
        raise Blocker(OPTIONS, where, "static_broadcasted_argnums is not a literal int or "
                      "tuple of ints")
    if any(not 0 <= v < count for v in values) or len(set(values)) != len(values):
        raise Blocker(OPTIONS, where, "static_broadcasted_argnums outside the parameters calls "
                      "pass (negative, repeated, or a functools.partial keyword's)")
    if len(values) == count:
        raise Blocker(OPTIONS, where, "every argument is static: pmap maps nothing")
    return tuple(sorted(values))


def _in_axes(node, count: int, where, body) -> tuple:
    """One entry per parameter: 0 / None, an int k >= 1 (a def body only: the rewrite
    squeezes that axis in the body's first statement), or a dict / tuple tree of 0 / None."""
    if node is None:
        return (0,) * count
    axes = read_axes(node, "in_axes")
    if isinstance(axes, list):
        raise Blocker(OPTIONS, where, "in_axes is a list, on which pmap raises (it needs a "
                      "tuple): the original does not run this site")
    if is_axis(axes):
        axes = (axes,) * count
    elif isinstance(axes, tuple) and len(axes) == count:
        axes = tuple(a if is_axis(a) else _tree_entry(a, where) for a in axes)
    else:
        raise Blocker(OPTIONS, where, "in_axes is not an int, None or a tuple of them (or of "
                      "trees of 0 and None)")
    if any(type(a) is int and a >= 1 for a in axes) and isinstance(body, ast.Lambda):
        raise Blocker(OPTIONS, where, "in_axes other than 0 on a lambda: the slice pmap hands "
                      "the body has no size-1 axis, and a lambda has no statement to drop it in")
    return axes


def _tree_entry(axes, where):
    """An in_axes entry that is a dict / tuple tree of 0 and None (collapsed when uniform)."""
    tree = _zero_none_tree(axes)
    if tree is _INVALID:
        raise Blocker(OPTIONS, where, "in_axes entries other than an int, None, or a dict / "
                      "tuple tree of 0 and None")
    leaves = _tree_leaves(tree)
    return leaves[0] if len(set(leaves)) == 1 else tree

_INVALID = object()


def _zero_none_tree(axes):
    """An in_axes entry of 0 / None leaves in string-keyed dicts and non-empty tuples / lists,
    with the lists made tuples; _INVALID for anything else."""
    if axes is None or (type(axes) is int and axes == 0):
        return axes
    children = string_keyed(axes)
    if children:
        children = {key: _zero_none_tree(child) for key, child in children.items()}
        return _INVALID if _INVALID in children.values() else children
    if isinstance(axes, (tuple, list)) and axes:
        children = tuple(_zero_none_tree(child) for child in axes)
        return _INVALID if _INVALID in children else children
    return _INVALID


def _tree_leaves(tree) -> list:
    if isinstance(tree, dict):
        return [leaf for child in tree.values() for leaf in _tree_leaves(child)]
    if isinstance(tree, tuple):
        return [leaf for child in tree for leaf in _tree_leaves(child)]
    return [tree]


def constant_defaults_left(function: ast.FunctionDef, calls) -> dict[str, object]:
    """The parameters of `function` whose default is a constant that none of `calls` passes
    (by position or keyword), with that constant; none where a call spreads `*args` or
    `**kwargs`, whose parameters cannot be told."""
    if any(isinstance(a, ast.Starred) for c in calls for a in c.args) \
            or any(k.arg is None for c in calls for k in c.keywords):
        return {}
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [*zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults),
                *((a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)
                  if d is not None)]
    left = {a.arg: d.value for a, d in defaults if isinstance(d, ast.Constant)}
    for call in calls:
        for name in {a.arg for a in positional[:len(call.args)]} | {k.arg for k in call.keywords}:
            left.pop(name, None)
    return left
