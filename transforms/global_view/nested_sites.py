"""A nested pmap in the global style: one `jax.jit(jax.shard_map(...))` over a 2-D mesh.

`@partial(pmap, axis_name="i")` stacked over `@partial(pmap, axis_name="j")` on a module-level
def maps an (n_i, n_j, ...) input: the outer level its leading axis, the inner one its second.
That is one shard_map over the mesh `("i", "j")` of shape (n_i, n_j) with every argument and
result `P("i", "j")` (a level's in_axes / out_axes of None drops its axis: `P("j")`, `P("i")`):
each device gets a (1, 1, ...) block, which the body sees squeezed, as pmap's did, and a
collective over "i", "j" or ("i", "j") keeps its meaning on the named mesh axes. The mesh is
sized as pmap sized it, from an argument each level maps, which jit knows when it traces:
`_grid_mesh((n_i, n_j), ("i", "j"))`, the module's one cached 2-D mesh function, over the first
n_i * n_j devices. Callers keep pmap's rows, both ways, so nothing about them changes; the main
pass reads such a site as one that keeps pmap's layout (its PM602 blocker), which is exactly
what it gets. With in_axes other than 0 the step is positional-only: pmap maps a keyword
argument on axis 0 whatever in_axes says, which a call by name would silently change.

Kept on pmap's contract (the faithful nested helper), with the reason in the PM602 finding:
options other than a literal `axis_name` and in_axes / out_axes of 0 / None (the inner
out_axes 0), both levels naming one axis, a level that maps no argument or parameters that
are not plain named ones (the mesh sizes are read from them), a pmap in the body, and, in a
multi-process module, a site that a multi-process reference reaches
(faithful/multiprocess.process_read_reaching).
"""

from __future__ import annotations

import ast
import dataclasses

import libcst as cst

from transforms.codes.findings import Finding
from transforms.codes.global_view import OPTIONS, SITE
from transforms.faithful.multiprocess import process_read_reaching
from transforms.global_view.sites import PARTIAL, PMAP, dotted
from transforms.global_view.values import quoted
from transforms.imports import RuleContext, add_import, apply_queued_imports, remove_import

GRID_MESH = "_grid_mesh"
NESTED_BLOCKER = "a nested pmap (pmap of a pmap)"  # how the main pass's PM602 names the site

GRID_MESH_TEXT = '''@{functools}.cache
def {name}(shape, axis_names):
    """The 2-D mesh of a nested pmap's two levels, sized as pmap sized them: the first
    rows * cols devices, built at first use (never at import)."""
    rows, cols = shape
    return {jax}.make_mesh(
        shape, axis_names, axis_types=(AxisType.Auto,) * 2, devices={jax}.devices()[:rows * cols]
    )
'''


@dataclasses.dataclass
class NestedSite:
    function: ast.FunctionDef
    axes: tuple[str, str]  # (outer, inner)
    decorator: ast.AST  # the outer decorator (where findings stand)
    # per parameter, (outer in_axis, inner in_axis), each 0 or None (pmap's default: 0, 0)
    in_axes: tuple[tuple[int | None, int | None], ...] = ()
    # the outer level's out_axes: 0 or None for the whole result, or a tuple, one per result
    out_axes: int | None | tuple = 0

    @property
    def defaults(self) -> bool:
        """pmap's default axes at both levels (keyword arguments mapped as positional ones)."""
        return all(a == (0, 0) for a in self.in_axes) and self.out_axes == 0


class NotGlobal(Exception):
    """Why a nested site keeps pmap's contract."""


def nested_sites(tree: ast.Module, imported: dict[str, str], multiprocess: bool
                 ) -> tuple[list[NestedSite], list[Finding]]:
    """The module-level defs under two stacked pmap decorators that can go global, and a
    PM602 finding for each other one (its reason)."""
    sites, refused = [], []
    for statement in tree.body:
        if not isinstance(statement, ast.FunctionDef) or len(statement.decorator_list) < 2 \
                or sum(_axis_of(d, imported) is not None for d in statement.decorator_list) < 2:
            continue
        try:
            sites.append(_site(statement, imported))
            if multiprocess:
                found = process_read_reaching(tree, imported, statement.lineno)
                if found is not None:
                    raise NotGlobal(f"a multi-process reference reaches it (`{found[1]}`, line "
                                    f"{found[0]}): a mesh of one process's devices is not pmap's")
        except NotGlobal as why:
            if sites and sites[-1].function is statement:
                sites.pop()
            decorator = statement.decorator_list[0]
            refused.append(Finding(OPTIONS, decorator.lineno, decorator.col_offset + 1,
                                   f"{NESTED_BLOCKER}: kept on pmap's contract, {why}"))
    return sites, refused


def _axis_of(decorator, imported) -> str | None | bool:
    """A pmap decorator's axis name (a literal string); False for a pmap decorator with
    anything else; None for any other decorator."""
    if dotted(decorator, imported) == PMAP:
        return False
    if not (isinstance(decorator, ast.Call) and dotted(decorator.func, imported) == PARTIAL
            and decorator.args and dotted(decorator.args[0], imported) == PMAP):
        return None
    keywords = {k.arg: k.value for k in decorator.keywords}
    name = keywords.get("axis_name")
    if len(decorator.args) != 1 or not set(keywords) <= {"axis_name", "in_axes", "out_axes"} \
            or not (isinstance(name, ast.Constant) and isinstance(name.value, str)) \
            or any(_axes(keywords[k]) is False for k in ("in_axes", "out_axes") if k in keywords):
        return False
    return name.value


def _axes(node) -> int | None | tuple | bool:
    """A literal in_axes / out_axes of 0 / None, or a tuple of them; False for anything else."""
    zero_or_none = lambda n: isinstance(n, ast.Constant) and (
        n.value is None or type(n.value) is int and n.value == 0)
    if zero_or_none(node):
        return node.value
    if isinstance(node, ast.Tuple) and node.elts and all(map(zero_or_none, node.elts)):
        return tuple(e.value for e in node.elts)
    return False


def _level_axes(decorator, keyword: str):
    value = next((k.value for k in decorator.keywords if k.arg == keyword), None)
    return 0 if value is None else _axes(value)


def _site(function: ast.FunctionDef, imported) -> NestedSite:
    decorators = function.decorator_list
    if len(decorators) != 2:
        raise NotGlobal("the def has other decorators than the two pmaps")
    axes = tuple(_axis_of(d, imported) for d in decorators)
    for decorator, axis in zip(decorators, axes):
        if not isinstance(axis, str):
            options = [k.arg for k in getattr(decorator, "keywords", ()) if k.arg != "axis_name"]
            raise NotGlobal(f"the level at line {decorator.lineno} has "
                            f"{', '.join(options) or 'no literal axis_name'}: only a literal "
                            "axis_name and in_axes / out_axes of 0 or None are written")
    if axes[0] == axes[1]:
        raise NotGlobal(f"both levels name the axis {axes[0]!r}")
    arguments = function.args
    odd = [f"`*{arguments.vararg.arg}`"] if arguments.vararg else []
    odd += [f"`**{arguments.kwarg.arg}`"] if arguments.kwarg else []
    odd += [f"keyword-only `{a.arg}`" for a in arguments.kwonlyargs]
    odd += [f"positional-only `{a.arg}`" for a in arguments.posonlyargs]
    odd += ["a default"] if arguments.defaults else []
    odd += [] if arguments.args or odd else ["no parameter"]
    if odd:
        what = odd[0]
        raise NotGlobal(f"its mesh shape is not known: it is read from the leading axes of "
                        f"named parameters, and the function has {what}")
    if any(dotted(n, imported) == PMAP for part in [*function.body, function.args]
           for n in ast.walk(part) if isinstance(n, (ast.Name, ast.Attribute))):
        raise NotGlobal("the function holds another pmap")
    count = len(arguments.args)
    per_level = []
    for decorator in decorators:
        axes_in = _level_axes(decorator, "in_axes")
        if isinstance(axes_in, tuple) and len(axes_in) != count:
            raise NotGlobal(f"in_axes (line {decorator.lineno}) has {len(axes_in)} entries for "
                            f"{count} parameters")
        per_level.append(axes_in if isinstance(axes_in, tuple) else (axes_in,) * count)
    in_axes = tuple(zip(*per_level))
    if _level_axes(decorators[1], "out_axes") != 0:
        raise NotGlobal("the inner level has out_axes other than 0")
    for level, name in ((0, "outer"), (1, "inner")):
        if all(pair[level] is None for pair in in_axes):
            raise NotGlobal(f"its mesh shape is not known: no argument is mapped by the {name} "
                            "level, whose size pmap reads from one")
    used = {"per_device", "_squeeze", "_expand", "_out", "P", "jax"} \
        & {a.arg for a in arguments.args}
    if used:
        raise NotGlobal(f"a parameter is named `{sorted(used)[0]}`, a name the rewrite uses")
    return NestedSite(function, axes, decorators[0], in_axes,
                      _level_axes(decorators[0], "out_axes"))


def rewrite_nested_sites(source: bytes, original: ast.Module, sites: list[NestedSite],
                         imported: dict[str, str]) -> tuple[bytes, list[NestedSite]]:
    """`source` (the main pass's output) with each site whose def it left as written rewritten:
    the def renamed `_name` without its decorators, and a jitted `name` over the 2-D mesh
    after it. Returns the source and the sites rewritten."""
    tree = ast.parse(source)
    defs = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | set(defs) \
        | {a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
           for a in n.names}
    jax = next((local for local, full in imported.items() if full == "jax"), "jax")
    functools = next((local for local, full in imported.items() if full == "functools"), None)
    mesh = _fresh(GRID_MESH, bound)
    lines = source.decode("utf-8").splitlines(keepends=True)
    done, edits = [], []
    for site in sites:
        here = defs.get(site.function.name)
        if here is None or ast.dump(here) != ast.dump(site.function):
            continue  # the main pass changed it (or a name's binding): left to the faithful rules
        inner = _fresh(f"_{here.name}", bound)
        bound.add(inner)
        start = here.decorator_list[0].lineno - 1
        header = lines[here.lineno - 1]
        renamed = header.replace(f"def {here.name}(", f"def {inner}(", 1)
        body = [renamed, *lines[here.lineno:here.end_lineno]]
        edits.append((start, here.end_lineno,
                      "".join(body) + "\n\n" + _wrapper(site, here, inner, jax, mesh)))
        done.append(site)
    if not done:
        return source, []
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    first_start = min(start for start, _, _ in edits)
    mesh_text = GRID_MESH_TEXT.format(functools=functools or "functools", name=mesh, jax=jax)
    lines[first_start:first_start] = [mesh_text + "\n\n"]
    module = cst.parse_module("".join(lines))
    context = RuleContext()
    if functools is None:
        add_import(context, "functools")
    if jax not in imported:
        add_import(context, "jax")
    add_import(context, "jax.sharding", "AxisType")
    add_import(context, "jax.sharding", "PartitionSpec", "P")
    for local, full in imported.items():  # removed only where nothing loads it now
        if full == "jax.pmap":
            remove_import(context, "jax", "pmap", None if local == "pmap" else local)
        elif full == "functools.partial":
            remove_import(context, "functools", "partial", None if local == "partial" else local)
    return apply_queued_imports(module, context).code.encode("utf-8"), done


def _wrapper(site: NestedSite, function: ast.FunctionDef, inner: str, jax: str,
             mesh: str) -> str:
    params = [a.arg for a in function.args.args]
    outer_name, inner_name = (quoted(a) for a in site.axes)
    names = ", ".join(params)

    def spec(pair) -> str:
        entries = [name for axis, name in zip(pair, (outer_name, inner_name)) if axis == 0]
        return f"P({', '.join(entries)})"

    def count(pair) -> int:
        return sum(axis == 0 for axis in pair)

    squeeze = f"lambda tree, axes: {jax}.tree.map(lambda a: {jax}.lax.squeeze(a, axes), tree)"
    expand = f"lambda tree, axes: {jax}.tree.map(lambda a: {jax}.lax.expand_dims(a, axes), tree)"
    lines = [f"@{jax}.jit",
             # pmap maps keyword arguments on axis 0 whatever in_axes says: with other axes,
             # only positional calls are taken (a keyword call is a TypeError, not a guess)
             f"def {function.name}({names}{'' if site.defaults else ', /'}):",
             f"    def per_device({names}):",
             f"        _squeeze = {squeeze}",
             f"        _expand = {expand}"]
    for param, pair in zip(params, site.in_axes):
        if count(pair):
            lines.append(f"        {param} = _squeeze({param}, {tuple(range(count(pair)))})")
    call = f"{inner}({names})"
    if isinstance(site.out_axes, tuple):
        outs = [f"_expand(_out[{i}], {(0,) if axis is None else (0, 1)})"
                for i, axis in enumerate(site.out_axes)]
        lines += [f"        _out = {call}",
                  f"        return ({', '.join(outs)}{',' if len(outs) == 1 else ''})"]
        out_specs = "(" + ", ".join(spec((axis, 0)) for axis in site.out_axes) \
            + ("," if len(site.out_axes) == 1 else "") + ")"
    else:
        axes = (0,) if site.out_axes is None else (0, 1)
        lines.append(f"        return _expand({call}, {axes})")
        out_specs = spec((site.out_axes, 0))
    # pmap's sizes: the outer one from an argument the outer level maps (its axis 0), the
    # inner one from an argument the inner level maps (after the outer axis, if mapped too)
    first = lambda level: next(i for i, pair in enumerate(site.in_axes) if pair[level] == 0)
    outer_at, inner_at = first(0), first(1)
    if outer_at == inner_at and site.in_axes[inner_at] == (0, 0):
        size = f"{jax}.numpy.shape({jax}.tree.leaves({params[outer_at]})[0])[:2]"
    else:
        leaf = lambda i: f"{jax}.numpy.shape({jax}.tree.leaves({params[i]})[0])"
        size = f"({leaf(outer_at)}[0], {leaf(inner_at)}[{1 if site.in_axes[inner_at][0] == 0 else 0}])"
    in_specs = "(" + ", ".join(spec(pair) for pair in site.in_axes) \
        + ("," if len(params) == 1 else "") + ")"
    lines += ["",
              f"    return {jax}.shard_map(",
              f"        per_device, mesh={mesh}({size}, ({outer_name}, {inner_name})),",
              f"        in_specs={in_specs}, out_specs={out_specs}, check_vma=False,",
              f"    )({names})"]
    return "\n".join(lines) + "\n"


def _fresh(name: str, bound: set[str]) -> str:
    candidate, number = name, 2
    while candidate in bound:
        candidate, number = f"{name}_{number}", number + 1
    return candidate


def migrated_finding(site: NestedSite) -> Finding:
    outer, inner = (quoted(a) for a in site.axes)
    if site.defaults:
        specs = f"in_specs and out_specs P({outer}, {inner})"
    else:
        spec = lambda pair: f"P({', '.join(n for a, n in zip(pair, (outer, inner)) if a == 0)})"
        outs = site.out_axes if isinstance(site.out_axes, tuple) else (site.out_axes,)
        specs = f"in_specs ({', '.join(spec(p) for p in site.in_axes)}), out_specs " \
            f"({', '.join(spec((a, 0)) for a in outs)})"
    return Finding(SITE, site.decorator.lineno, site.decorator.col_offset + 1,
                   f"went global on the 2-D mesh ({outer}, {inner}) sized from the mapped "
                   f"arguments: {specs}")
