"""A nested pmap in the global style: one `jax.jit(jax.shard_map(...))` over a 2-D mesh.

`@partial(pmap, axis_name="i")` stacked over `@partial(pmap, axis_name="j")` on a module-level
def maps an (n_i, n_j, ...) input: the outer level its leading axis, the inner one its second.
That is one shard_map over the mesh `("i", "j")` of shape (n_i, n_j) with every argument and
result `P("i", "j")`: each device gets a (1, 1, ...) block, which the body sees squeezed, as
pmap's did, and a collective over "i", "j" or ("i", "j") keeps its meaning on the named mesh
axes. The mesh is sized as pmap sized it, from the two leading axes of the arguments, which
jit knows when it traces (no check at call time): `_grid_mesh((n_i, n_j), ("i", "j"))`, the
module's one cached 2-D mesh function, over the first n_i * n_j devices. Callers keep pmap's
(n_i, n_j, ...) rows, both ways, so nothing about them changes; the main pass reads such a
site as one that keeps pmap's layout (its PM602 blocker), which is exactly what it gets.

Kept on pmap's contract (the faithful nested helper), with the reason in the PM602 finding:
a level with options other than a literal `axis_name`, both levels naming one axis, a mapped
function whose parameters are not plain named ones (the mesh sizes are read from them), a
module that cannot import what the text needs, and, in a multi-process module, a site that a
multi-process reference reaches (faithful/multiprocess.process_read_reaching).
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
    if len(decorator.args) != 1 or set(keywords) != {"axis_name"} \
            or not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return False
    return name.value


def _site(function: ast.FunctionDef, imported) -> NestedSite:
    decorators = function.decorator_list
    if len(decorators) != 2:
        raise NotGlobal("the def has other decorators than the two pmaps")
    axes = tuple(_axis_of(d, imported) for d in decorators)
    for decorator, axis in zip(decorators, axes):
        if not isinstance(axis, str):
            options = [k.arg for k in getattr(decorator, "keywords", ()) if k.arg != "axis_name"]
            raise NotGlobal(f"a level has {', '.join(options) or 'no literal axis_name'} (line "
                            f"{decorator.lineno}): only a literal axis_name per level is written")
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
    return NestedSite(function, axes, decorators[0])


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
                      "".join(body) + "\n\n" + _wrapper(here, inner, site.axes, jax, mesh)))
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


def _wrapper(function: ast.FunctionDef, inner: str, axes: tuple[str, str], jax: str,
             mesh: str) -> str:
    params = [a.arg for a in function.args.args]
    names = ", ".join(params)
    spec = f"P({quoted(axes[0])}, {quoted(axes[1])})"
    axis_names = f"({quoted(axes[0])}, {quoted(axes[1])})"
    squeezed = f"{jax}.tree.map(lambda y: {jax}.lax.squeeze(y, (0, 1)), " \
        f"{'(' + names + ',)' if len(params) == 1 else '(' + names + ')'})"
    unpack = f"({names},)" if len(params) == 1 else names
    in_specs = "(" + ", ".join([spec] * len(params)) + ("," if len(params) == 1 else "") + ")"
    return (
        f"@{jax}.jit\n"
        f"def {function.name}({names}):\n"
        f"    def per_device({names}):\n"
        f"        {unpack} = {squeezed}\n"
        f"        return {jax}.tree.map(lambda y: {jax}.lax.expand_dims(y, (0, 1)), "
        f"{inner}({names}))\n"
        f"\n"
        f"    shape = {jax}.numpy.shape({jax}.tree.leaves(({names},))[0])[:2]\n"
        f"    return {jax}.shard_map(\n"
        f"        per_device, mesh={mesh}(shape, {axis_names}), in_specs={in_specs},\n"
        f"        out_specs={spec}, check_vma=False,\n"
        f"    )({names})\n"
    )


def _fresh(name: str, bound: set[str]) -> str:
    candidate, number = name, 2
    while candidate in bound:
        candidate, number = f"{name}_{number}", number + 1
    return candidate


def migrated_finding(site: NestedSite) -> Finding:
    outer, inner = (quoted(a) for a in site.axes)
    return Finding(SITE, site.decorator.lineno, site.decorator.col_offset + 1,
                   f"went global: one jit(shard_map) over the 2-D mesh ({outer}, {inner}), "
                   f"sized from the arguments' two leading axes, in_specs and out_specs "
                   f"P({outer}, {inner}); callers keep pmap's rows")
