"""The global-view pass over one module: decide which sites and callers go global, edit them.

Sites and their callers fall back together: a caller that cannot be followed keeps every site
it calls faithful, and a site that cannot go global keeps every caller faithful, so no value
ever crosses between the two layouts. What goes global:
- the site: `jax.jit` (with pmap's donate_argnums) over
  `jax.shard_map(body, mesh=_mesh(axis), in_specs, out_specs=P(), check_vma=False)`, body
  unchanged. At module level that is a jitted def (step_text.py), so the mesh is built at the
  first call: `_mesh` is the module's cached 1-D mesh over all devices, never built at import;
- each caller: the edits `dataflow` recorded, its placements naming the mesh
  (`NamedSharding(mesh, P(...))`, with `mesh = _mesh(axis)` bound on entry). No mesh context:
  under `jax.set_mesh` the user's own eager jax.numpy values would be placed on every device.
"""

from __future__ import annotations

import ast
import codecs
import dataclasses
import io
import re
import sys
import tokenize

import libcst as cst

from transforms.codes.findings import Finding
from transforms.codes.global_view import (
    CALLERS_UNSEEN,
    CONSUMER_UNKNOWN,
    FALLS_BACK_WITH_CALLER,
    PRODUCER_UNKNOWN,
    SITE,
    UNAVAILABLE,
)
from transforms.faithful.multiprocess import first_evidence
from transforms.global_view.classes import class_callers, faithful_class_use
from transforms.global_view.dataflow import CallerAnalysis, CallerResult
from transforms.global_view.axes import MESH, fresh_name, module_names
from transforms.global_view.hoist import hoist_local_sites, inline_key
from transforms.global_view.layout import FunctionLayout
from transforms.global_view.multiprocess import (
    NAMES as MULTIPROCESS_NAMES,
    MultiProcessCallerAnalysis,
    host_barrier_sites,
    process_idiom_findings,
)
from transforms.global_view.process_dependence import ProcessDependence
from transforms.global_view.replication import BodyAnalysis, result_elements
from transforms.global_view.sites import Blocker, Site, dotted, find_sites, string_constants
from transforms.global_view.step_text import LINE_LIMIT, MESH_FUNCTION_TEXT, step_def
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    MERGED_OUT,
    MESH_FUNCTION,
    MESH_PLACEHOLDER,
    SCALARS_OUT,
    STACKED_OUT,
    quoted,
    stacked_axis,
)
from transforms.imports import RuleContext, add_import, apply_queued_imports
from transforms.reading.names import ImportTable
from transforms.target import TargetJax

MIN_TARGET = TargetJax(0, 7, 0)  # jax.shard_map, jax.make_mesh(axis_types=...)


@dataclasses.dataclass
class GlobalResult:
    source: bytes
    findings: list[Finding]
    layouts: tuple[FunctionLayout, ...] = ()
    global_sites: tuple[str, ...] = ()


class ModuleInfo:
    """The module's source and names, shared by the callers' analyses."""

    def __init__(self, source: bytes, tree: ast.Module, table: ImportTable):
        self.source = source
        self.tree = tree
        # A donating step deletes what it is given. pmap was given a fresh stack (or a copy of
        # it), never the user's value itself, so producers unstack to a fresh buffer here.
        self.donating = b"donate_argnums" in source
        self.imported = table.imported
        self.table = table
        self._line_starts = [0]
        for line in source.splitlines(keepends=True):
            self._line_starts.append(self._line_starts[-1] + len(line))
        self.jax = next((name for name, full in table.imported.items() if full == "jax"), "jax")
        self.unreplicate_helpers = {
            s.name for s in tree.body if isinstance(s, ast.FunctionDef) and _is_unreplicate(s, self)
        }
        self._bodies: dict[str, BodyAnalysis] = {}
        self.constants = string_constants(tree)
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        self.callers: set[str] = set()  # set once the callers are known
        self.under_other_mesh: set[str] = set()  # sites run on another axis's mesh (axes.py)
        self._taken = module_names(tree)  # what a new module-level name must not shadow
        self.mesh_function = self.fresh(MESH_FUNCTION)
        self.loads: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self.loads[node.id] = self.loads.get(node.id, 0) + 1
        self.partial = next((n for n, full in table.imported.items() if full == "functools.partial"),
                            None) or next((f"{n}.partial" for n, full in table.imported.items()
                                           if full == "functools"), None)
        self.partial = self.partial or "functools.partial"
        self.numpy = next((n for n, full in table.imported.items() if full == "jax.numpy"),
                          f"{self.jax}.numpy")

    def fresh(self, name: str) -> str:
        return fresh_name(name, self._taken)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self._line_starts[node.lineno - 1] + node.col_offset,
                self._line_starts[node.end_lineno - 1] + node.end_col_offset)

    def render(self, start: int, end: int, edits: dict[tuple[int, int], str]) -> str:
        """Source bytes start:end with the outermost edits inside applied."""
        out, position = [], start
        inside = [k for k in edits if start <= k[0] and k[1] <= end and k != (start, end)]
        for (a, b) in sorted(inside, key=lambda k: (k[0], -k[1])):
            if a < position:
                continue  # inside an edit already applied
            out.append(self.source[position:a].decode("utf-8"))
            out.append(edits[(a, b)])
            position = b
        if (start, end) in edits:
            return edits[(start, end)]
        out.append(self.source[position:end].decode("utf-8"))
        return "".join(out)

    def body_analysis(self, site: Site) -> BodyAnalysis:
        if site.key not in self._bodies:
            self._bodies[site.key] = BodyAnalysis(site, self.tree, self.imported, self.constants)
        return self._bodies[site.key]

    def starts_a_line(self, body) -> bool:
        """The body's first statement (after a docstring) begins its own line, so a statement
        can be put before it."""
        if not isinstance(body, ast.FunctionDef):
            return False
        first = first_body_statement(body)
        start = self.span(first)[0]
        line_start = self._line_starts[first.lineno - 1]
        return not self.source[line_start:start].strip()

    def can_stack_results(self, site: Site) -> bool:
        """Per-device results keep their device axis by an expand at the body's returns;
        that edit is only made in a body no other code uses."""
        if site.decorated or isinstance(site.body, ast.Lambda):
            return True
        return self.loads.get(site.body.name, 0) == 1


def _is_unreplicate(function: ast.FunctionDef, module: ModuleInfo) -> bool:
    """`def unreplicate(tree): return jax.tree.map(lambda x: x[0], tree)`."""
    from transforms.global_view.values import TREE_MAP, is_row_zero_lambda

    if len(function.args.args) != 1 or len(function.body) != 1 or function.decorator_list:
        return False
    statement = function.body[0]
    if not (isinstance(statement, ast.Return) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    return (dotted(call.func, module.imported) in TREE_MAP and len(call.args) == 2
            and isinstance(call.args[0], ast.Lambda) and is_row_zero_lambda(call.args[0])
            and isinstance(call.args[1], ast.Name) and call.args[1].id == function.args.args[0].arg)


def migrate_global(source: bytes, target: TargetJax) -> GlobalResult:
    """The module with every recognised program rewritten to the global view; findings say
    which sites went global (PM600) and why each other one did not (PM601-PM608)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return GlobalResult(source, [])
    table = ImportTable.from_tree(tree)
    sites, blockers = find_sites(tree, table.imported)
    # Host barriers become sync_global_devices in the faithful rules, with no pmap left.
    barriers = host_barrier_sites(sites, tree, table.imported)
    barrier_pmaps = {id(n) for s in sites if s.key in barriers for n in ast.walk(s.node)}
    sites = [s for s in sites if s.key not in barriers]
    if not sites and not blockers:
        return GlobalResult(source, [])
    multiprocess = first_evidence(tree, table.imported) is not None
    module_blocker = _encoding_blocker(source) or _module_blocker(tree, table, target, multiprocess)
    if module_blocker is not None:
        nodes = [s.node for s in sites] + [b.node for b in blockers]
        return GlobalResult(source, [_finding(Blocker(UNAVAILABLE, n, module_blocker))
                                     for n in nodes])
    module = ModuleInfo(source, tree, table)
    analysis = CallerAnalysis
    if multiprocess:  # see global_view/multiprocess.py
        module.process_dependence = ProcessDependence(tree, table.imported)
        module.sometimes_called = module.process_dependence.sometimes_called()
        analysis = MultiProcessCallerAnalysis
    findings = [_finding(b) for b in blockers]
    by_name = {s.key: s for s in sites}
    faithful = {name: b for b in blockers for name in b.names}
    callers, blocked = _callers(tree, by_name, faithful)
    module.callers = set(callers)
    results: dict[str, CallerResult] = {}
    blocked_callers: dict[str, Blocker] = {}
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    called_names = _called_function_names(tree)
    changed = True
    while changed:
        changed = False
        for caller, called in sorted(callers.items()):
            if caller in blocked_callers:
                continue
            failed = next((blocked[s] for s in sorted(called) if s in blocked), None)
            if failed is None:
                try:
                    result = analysis(functions[caller], {s: by_name[s] for s in called},
                                      module).run()
                    faithful_call = _faithful_callee(
                        functions[caller], functions, callers, blocked_callers, table.imported,
                        {s.name for s in sites if s.owner is None and s.key not in blocked},
                        barrier_pmaps) or faithful_class_use(
                        functions[caller], tree, table.imported, sites, blocked,
                        lambda method: _faithful_callee(
                            method, functions, callers, blocked_callers, table.imported,
                            {s.name for s in sites if s.owner is None and s.key not in blocked}
                            | {s.statement.name for s in sites if s.holder and s.factory},
                            barrier_pmaps))
                    if faithful_call is not None:
                        raise Blocker(FALLS_BACK_WITH_CALLER, faithful_call, f"`{caller}` calls "
                                      f"`{faithful_call.id}`, which keeps pmap code in the "
                                      "faithful style; it would run under this function's mesh")
                    if result.returns_changed and caller in called_names:
                        raise Blocker(CONSUMER_UNKNOWN, functions[caller],
                                      f"`{caller}` returns values "
                                      "in the global layout to callers in this module")
                    results[caller] = result
                    continue
                except Blocker as blocker:
                    failed = blocker
            blocked_callers[caller] = failed
            results.pop(caller, None)
            for site in called:
                if site not in blocked:
                    blocked[site] = failed if failed.code != FALLS_BACK_WITH_CALLER else failed
                    changed = True
        # A site's in_specs, result mode and mesh axis must agree across its callers.
        for name in by_name:
            seen = {_usage(results[c], name) for c in callers_of(name, callers) if c in results}
            if len(seen) > 1 and name not in blocked:
                blocked[name] = Blocker(PRODUCER_UNKNOWN, by_name[name].node,
                                        f"{by_name[name].label} is called with different layouts")
                changed = True
        for caller in list(results):
            if any(s in blocked for s in callers[caller]):
                results.pop(caller)
                changed = True
    for name, site in by_name.items():
        if name in blocked:
            blocker = blocked[name]
            if blocker.node is site.node or _inside(blocker.node, site.statement):
                findings.append(_finding(blocker))
            else:
                findings.append(_finding(Blocker(
                    FALLS_BACK_WITH_CALLER, site.node,
                    f"{site.label} stays faithful: its caller cannot go global "
                    f"(line {blocker.node.lineno}: {blocker.message})")))
                findings.append(_finding(blocker))
    global_sites = [s for s in sites if s.key not in blocked]
    if not global_sites:
        return GlobalResult(source, _dedupe(findings))
    edits: dict[tuple[int, int], str] = {}
    for caller in sorted(results) if multiprocess else ():
        findings += [Finding("PM506", node.lineno, node.col_offset + 1, message)
                     for node, message in process_idiom_findings(functions[caller], module)]
    for caller, result in results.items():
        axis = quoted(result.axis)
        own = module.span(functions[caller])
        # The caller binds `mesh` on entry; code it reaches elsewhere (the methods of a class
        # it instantiates) names the module's mesh function.
        elsewhere = f"{module.mesh_function}({axis})"
        edits.update({k: v.replace(AXIS_PLACEHOLDER, axis).replace(
            MESH_PLACEHOLDER, MESH if _within(k, own) else elsewhere)
            for k, v in result.edits.items()})
    site_edits: dict[tuple[int, int], str] = {}
    module.under_other_mesh = {key for r in results.values() for key, axis in r.site_axes.items()
                               if axis != r.axis}
    for site in global_sites:
        specs, mode, axis = _usage(next(results[c] for c in callers_of(site.key, callers)), site.key)
        modes = mode if isinstance(mode, tuple) else (mode,)
        out_specs = _out_specs(site, mode, axis)
        site_edits.update(_site_edits(site, specs, out_specs, mode, module, axis))
        if any(stacked_axis(m) is not None for m in modes):
            kept = "; per-device results keep their device axis (expanded in the body, P(axis))"
        elif MERGED_OUT in modes:
            kept = "; per-device results come back merged into their leading axis (P(axis))"
        elif SCALARS_OUT in modes:
            kept = ("; per-device numbers go in and come back as (1,) blocks of pmap's (n,) "
                    "layout (P(axis))")
        else:
            kept = ""
        if site.holder:
            kept += (f"; held by `{site.holder}`, whose methods and instance attributes were "
                     "followed from where its instances are made (callers in other modules "
                     "must pass global arrays to its methods too)")
        own = next((r for c, r in results.items() if site.key in callers.get(c, ())), None)
        if own is not None and site.key in module.under_other_mesh:
            mesh = dict((axis, name) for name, axis in own.meshes).get(axis, "its own mesh")
            kept += (f"; it runs on the mesh of axis {quoted(axis)} (`{mesh}` in the caller): "
                     f"the devices of the caller's `mesh` (axis {quoted(own.axis)}), in the "
                     "same order")
        if site.static:
            kept += f"; static arguments {', '.join(site.params[i] for i in site.static)} " \
                "are jax.jit's static_argnums and reach the body by closure"
        if multiprocess:
            kept += ("; multi-process: each process's rows become one global batch "
                     "(jax.make_array_from_process_local_data), replicated values are the same "
                     "on every process" + (", per-device results come back as the process's "
                                           "own rows" if STACKED_OUT in modes else ""))
        findings.append(Finding(
            SITE, site.node.lineno, site.node.col_offset + 1,
            f"{site.label} migrated in the global style: jax.jit(jax.shard_map(...)) with "
            f"in_specs {_tuple(specs)} and out_specs {out_specs}; its callers "
            f"({', '.join(sorted(callers_of(site.key, callers)))}) pass global arrays{kept}"))
    conflict = _compose(edits, site_edits, module)
    if conflict is not None:
        site = next(s for s in global_sites if _within(conflict, module.span(s.statement))
                    or _within(module.span(s.built), conflict)) if global_sites else None
        node = site.node if site is not None else tree
        return GlobalResult(source, _dedupe([f for f in findings if f.code != SITE] + [
            _finding(Blocker(CONSUMER_UNKNOWN, node,
                             "a caller's edit and this site's edit overlap in a "
                             "way the rewrite cannot join: the module stays faithful"))]))
    text = module.render(0, len(source), edits)
    new_module = cst.parse_module(text.encode("utf-8"))
    new_module = new_module.visit(_MeshOnEntry({c: r.axis for c, r in results.items()},
                                               module.mesh_function,
                                               {c: r.meshes for c, r in results.items()}))
    functools = next((n for n, full in table.imported.items() if full == "functools"), None)
    new_module = new_module.visit(_MeshFunction(MESH_FUNCTION_TEXT.format(
        functools=functools or "functools", name=module.mesh_function, jax=module.jax),
        import_functools=functools is None))
    keys = [(s, _hoist_key(s)) for s in global_sites]
    assigned = {k for s, k in keys if k is not None and not s.inline}
    inline = {k for s, k in keys if k is not None and s.inline}
    params = {k: ", ".join(s.params) for s, k in keys if k is not None}
    hoisted, moved = hoist_local_sites(new_module.code, module.jax, assigned, inline, params,
                                       module.partial)
    if moved:
        new_module = cst.parse_module(hoisted.encode("utf-8"))
        findings = _with_hoisting_noted(findings, global_sites, moved)
    context = RuleContext()
    add_import(context, "jax.sharding", "AxisType")
    if "NamedSharding(" in new_module.code:
        add_import(context, "jax.sharding", "NamedSharding")
    add_import(context, "jax.sharding", "PartitionSpec", "P")
    if "multihost_utils.global_array_to_host_local_array(" in text:
        add_import(context, "jax.experimental", "multihost_utils")
    if module.jax == "jax" and "jax" not in table.imported:
        add_import(context, "jax")
    new_module = apply_queued_imports(new_module, context)
    layouts = tuple(FunctionLayout(c, r.layouts) for c, r in sorted(results.items()) if r.layouts)
    return GlobalResult(new_module.bytes, _dedupe(findings), layouts,
                        tuple(s.key for s in global_sites))


def _hoist_key(site: Site) -> tuple[str, str] | None:
    """How hoist.py names a function-local site: (function, local name) when assigned,
    (function, mapped function's name or lambda text) when inline; None for sites it does not
    move."""
    if site.owner is None:
        return None
    if not site.inline:
        return site.owner, site.name
    key = inline_key(site.function_node)
    return None if key is None else (site.owner, key)


def _with_hoisting_noted(findings: list[Finding], sites: list[Site], moved: dict) -> list[Finding]:
    """PM600 of each site hoist.py moved says where it went, and why."""
    notes = {}
    for site in sites:
        key = _hoist_key(site)
        if key is not None and key in moved:
            notes[(site.node.lineno, site.node.col_offset + 1)] = (
                f"; built once, at module level as `{moved[key]}` (a shard_map made on each call "
                "would be traced and compiled again on each call; pmap cached it)")
    return [dataclasses.replace(f, message=f.message + notes[(f.line, f.col)])
            if f.code == SITE and (f.line, f.col) in notes else f for f in findings]


def _compose(edits: dict, site_edits: dict, module: ModuleInfo) -> tuple[int, int] | None:
    """Add the sites' edits to the callers' edits (in place). A caller's edit may contain a
    site (`jax.pmap(f)(x)[0]` becomes direct use around the inline site): its text holds the
    site's source verbatim, which is replaced by the site's text. Returns the span of an
    overlap that cannot be joined so (None when all joined)."""
    callers = list(edits)  # the sites' own edits never overlap each other
    for span, text in sorted(site_edits.items()):
        outer = [c for c in callers if _within(span, c) and c != span]
        inner = [c for c in callers if _within(c, span) and c != span and span[0] != span[1]]
        crossing = [c for c in callers if c[0] < span[1] and span[0] < c[1] and c not in outer
                    and c not in inner]
        if inner or crossing or (span in edits and edits[span] != text):
            return span
        original = module.source[span[0]:span[1]].decode("utf-8")
        for container in outer:
            if edits[container].count(original) != 1 or span[0] == span[1]:
                return span
            edits[container] = edits[container].replace(original, text)
        if not outer:
            edits[span] = text
    return None


def _usage(result: CallerResult, key: str) -> tuple[tuple[str, ...], str, str]:
    """(in_specs, result mode, mesh axis) of a site as one caller uses it."""
    own = result.site_axes.get(key, result.axis)  # the axis of the mesh the site runs under
    return tuple(s.replace(AXIS_PLACEHOLDER, quoted(own)) for s in result.specs[key]), \
        result.modes[key], own


def _out_specs(site: Site, mode, axis: str) -> str:
    """out_specs text: P() for replicated results, P(axis) (after pmap's out_axes position of
    Nones) for results that keep their device axis; a tuple / dict of them for out_axes trees."""
    def spec(one_mode: str) -> str:
        if one_mode in (MERGED_OUT, SCALARS_OUT):  # leading axis: the merged device axis
            return f"P({quoted(axis)})"
        at = stacked_axis(one_mode)
        return "P()" if at is None else f"P({'None, ' * at}{quoted(axis)})"

    if isinstance(mode, tuple) and isinstance(site.out_tree, dict):
        return "{" + ", ".join(f"{quoted(k)}: {spec(m)}" for k, m in zip(site.out_tree, mode)) + "}"
    if isinstance(mode, tuple):
        return _tuple([spec(m) for m in mode])
    return spec(mode)


def callers_of(site: str, callers: dict[str, set[str]]) -> list[str]:
    return [c for c, called in callers.items() if site in called]


def _encoding_blocker(source: bytes) -> str | None:
    """The global pass edits UTF-8 text (spans of the source, ast's byte columns): a file
    declared in another encoding keeps the faithful style, which edits it through libcst."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:
        return None  # ast.parse accepted it; the declaration is read the same way there
    if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig"):  # a BOM is UTF-8 too
        return None
    return f"the file's coding declaration gives {encoding}; the global style edits UTF-8 source only"


def _module_blocker(tree, table: ImportTable, target: TargetJax, multiprocess: bool) -> str | None:
    if target < MIN_TARGET:
        return (f"the global style needs jax.shard_map and jax.sharding.AxisType (JAX "
                f"{MIN_TARGET.major}.{MIN_TARGET.minor}"
                f"); the target is {target}: kept in the faithful style")
    if table.needs_scope_analysis:
        return "the module's imports are ambiguous (a name bound twice, or a star import)"
    # NamedSharding names every placement's mesh; multihost_utils reads per-process rows back.
    names = ("P", "AxisType", "NamedSharding", *(MULTIPROCESS_NAMES if multiprocess else ()))
    for name in dict.fromkeys(names):
        origin = "jax.experimental" if name == "multihost_utils" else "jax.sharding"
        if name in table.bound_otherwise or (
                name in table.imported and not table.imported[name].startswith(origin)):
            return f"the name `{name}` the global style imports is already used in the module"
    return None


def _callers(tree: ast.Module, sites: dict[str, Site], faithful: dict[str, Blocker]):
    """Module-level function -> the sites it calls; sites referenced any other way blocked.
    `faithful`: module-level pmap names that stay faithful; their callers stay faithful too."""
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
    for statement in tree.body:
        site_here = next((s for s in sites.values() if s.statement is statement), None)
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Name) and node.id in sites):
                continue
            name = node.id
            if site_here is not None and site_here.name == name and (
                    isinstance(node.ctx, ast.Store) or _inside(node, site_here.statement)):
                continue  # the site's own definition
            if isinstance(statement, ast.FunctionDef) and site_here is None \
                    and isinstance(node.ctx, ast.Load) and not _binds(statement, name):
                callers.setdefault(statement.name, set()).add(name)
            elif name not in blocked:
                blocked[name] = Blocker(CALLERS_UNSEEN, node, f"`{name}` is referenced outside a "
                                        "module-level function (or rebound): not every caller "
                                        "can be followed")
    for name, site in sites.items():
        if name not in blocked and not any(name in c for c in callers.values()):
            blocked[name] = Blocker(CALLERS_UNSEEN, site.node, f"`{name}` has no caller in this "
                                    "module, so the layouts of its arguments are unknown")
    return callers, blocked


def _faithful_callee(function, functions, callers, blocked_callers, imported, seen,
                     barrier_pmaps=frozenset()):
    """The first call in `function` of a module function that (itself or through its own
    calls) keeps pmap code faithful: a blocked caller, or one that mentions jax.pmap without
    being a caller of global sites. Such code must not run under a global caller's mesh.
    `barrier_pmaps`: ids of the pmaps of host barriers, which the faithful rules remove."""
    seen.add(function.name)
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                and node.id in functions and node.id not in seen):  # seen: global sites too
            continue
        callee = functions[node.id]
        mentions_pmap = any(dotted(n, imported) == "jax.pmap" for n in ast.walk(callee)
                            if isinstance(n, (ast.Name, ast.Attribute))
                            and id(n) not in barrier_pmaps)
        if node.id in blocked_callers or (mentions_pmap and node.id not in callers):
            return node
        if _faithful_callee(callee, functions, callers, blocked_callers, imported, seen,
                            barrier_pmaps):
            return node
    return None


def _binds(function: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
               for n in ast.walk(function)) or any(a.arg == name for a in ast.walk(function.args)
                                                   if isinstance(a, ast.arg))


def _called_function_names(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
    # A function's own definition does not load its name; any load is a use.
    return names


def _inside(node, statement) -> bool:
    return any(child is node for child in ast.walk(statement))


def _tuple(items) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _site_edits(site: Site, specs, out_specs: str, mode: str, module: ModuleInfo,
                axis: str) -> dict:
    """The edits of one global site: its pmap expression, and with per-device results an
    expand of every value the body returns (pmap's stacked output layout, kept)."""
    body_edits = {}
    values = [site.body.body] if isinstance(site.body, ast.Lambda) else [
        node.value for node in _own_returns(site.body) if node.value is not None]
    for value in values:
        if isinstance(mode, tuple):  # out_axes=(0, None, ...) / {...}: every return is such
            keys = list(range(len(mode))) if isinstance(site.out_tree, tuple) else list(site.out_tree)
            elements = result_elements(value, keys)
            for key, element_mode in zip(keys, mode):
                if stacked_axis(element_mode) is not None:
                    body_edits[module.span(elements[key])] = _expanded(
                        module, elements[key], stacked_axis(element_mode))
        elif stacked_axis(mode) is not None:
            body_edits[module.span(value)] = _expanded(module, value, stacked_axis(mode))
        if not isinstance(site.body, ast.Lambda):
            _fit_return(module, value, body_edits, stacked_axis(mode) if isinstance(mode, str)
                        else None)
    body_edits.update(_squeeze_edits(site, module))
    options = _options(specs, out_specs, module, axis)
    if site.decorated:
        return {**body_edits, **_decorated_def_edits(site, options, module)}
    at_module_level = site.owner is None and not site.holder and not site.factory
    built = module.span(site.statement if site.static or at_module_level else site.built)
    inside = {k: v for k, v in body_edits.items() if _within(k, built)}
    outside = {k: v for k, v in body_edits.items() if k not in inside}
    if site.static or at_module_level:
        return {**outside, built: _step_def(site, options, module, inside)}
    return {**outside, built: _site_text(site, options, module, inside)}


def _options(specs, out_specs: str, module: ModuleInfo, axis: str) -> list[str]:
    """shard_map's keyword arguments: the site's mesh, specs and check_vma=False."""
    return [f"mesh={module.mesh_function}({quoted(axis)})", f"in_specs={_tuple(specs)}",
            f"out_specs={out_specs}", "check_vma=False"]


def _fit_return(module: ModuleInfo, value, edits: dict, whole_axis: int | None) -> None:
    """Keep a returned value's line within the limit once its results are expanded: a
    tuple / dict literal gets one result per line, a whole expanded value moves into the
    tree.map call's own lines (edits is changed in place)."""
    start, end = module.span(value)
    if value.lineno != value.end_lineno or not any(_within(k, (start, end)) for k in edits):
        return
    line_start = module._line_starts[value.lineno - 1]
    line_end = module._line_starts[value.lineno] if value.lineno < len(module._line_starts) - 1 \
        else len(module.source)
    before = module.source[line_start:start].decode("utf-8")
    after = module.source[end:line_end].decode("utf-8").rstrip("\n")
    if len(before) + len(module.render(start, end, edits)) + len(after) <= LINE_LIMIT:
        return
    text = _multiline(module, value, edits, " " * (len(before) - len(before.lstrip())),
                      whole_axis)
    if text is None:
        return
    for key in [k for k in edits if _within(k, (start, end))]:
        del edits[key]
    edits[(start, end)] = text


def _multiline(module: ModuleInfo, value, edits: dict, indent: str, whole_axis: int | None):
    """`value` with its edits, spread over lines indented from `indent`: one result per line
    for a tuple / dict literal, or the whole expand call's arguments on their own line."""
    start, end = module.span(value)
    inner = indent + "    "
    if isinstance(value, (ast.Tuple, ast.Dict)) and (start, end) not in edits:
        if isinstance(value, ast.Tuple):
            lines = [module.render(*module.span(e), edits) for e in value.elts]
            opening, closing = "(", ")"
        else:
            lines = [f"{module.render(*module.span(k), edits)}: "
                     f"{module.render(*module.span(v), edits)}"
                     for k, v in zip(value.keys, value.values)]
            opening, closing = "{", "}"
        text = opening + "\n" + "".join(f"{inner}{line},\n" for line in lines) + indent + closing
    elif (start, end) in edits and whole_axis is not None:
        text = (f"{module.jax}.tree.map(\n{inner}lambda y: {module.numpy}.expand_dims(y, "
                f"{whole_axis}), {_argument_text(module, value)}\n{indent})")
    else:
        return None
    return text


def _squeeze_edits(site: Site, module: ModuleInfo) -> dict:
    """in_axes k >= 1: shard_map hands the body a block with a size-1 axis k where pmap
    handed it the slice without that axis, so the body's first statement drops it."""
    squeezed = [(p, a) for i, (p, a) in enumerate(zip(site.params, site.in_axes))
                if type(a) is int and a >= 1 and i not in site.static]
    if not squeezed:
        return {}
    first = first_body_statement(site.body)
    start = module.span(first)[0]
    indent = " " * first.col_offset
    text = "".join(f"{p} = {module.jax}.tree.map(lambda y: {module.numpy}.squeeze(y, {a}), {p})"
                   f"\n{indent}" for p, a in squeezed)
    return {(start, start): text}


def first_body_statement(function: ast.FunctionDef) -> ast.stmt:
    """The statement a squeeze goes before: the first one after a docstring."""
    statements = function.body
    docstring = isinstance(statements[0], ast.Expr) and isinstance(
        statements[0].value, ast.Constant) and isinstance(statements[0].value.value, str)
    return statements[1] if docstring and len(statements) > 1 else statements[0]


def _expanded(module: ModuleInfo, value: ast.AST, axis: int = 0) -> str:
    """`value` (a result or a tree of them) with pmap's device axis put back at `axis`."""
    text = _argument_text(module, value)
    return f"{module.jax}.tree.map(lambda y: {module.numpy}.expand_dims(y, {axis}), {text})"


def _argument_text(module: ModuleInfo, value: ast.AST) -> str:
    """The source of `value`, safe as one argument of a call."""
    text = _source(module, value)
    if isinstance(value, ast.Tuple) and not text.startswith("("):
        text = f"({text})"  # an unparenthesised tuple would become several arguments
    return text


def _decorated_def_edits(site: Site, options: list[str], module: ModuleInfo) -> dict:
    """A decorated site: the body keeps its def under a private name, and a jitted def of the
    public name, with pmap's donation and static numbering, hands the mapped arguments to
    shard_map (static ones reach the body by closure, as plain values)."""
    lines = module._line_starts
    first = site.outer_jit or site.node
    start = lines[first.lineno - 1]
    remove_decorators = {(start, lines[site.node.end_lineno]): ""}
    statement = site.statement
    header = module.source[module.span(statement)[0]:].decode("utf-8")
    name_at = module.span(statement)[0] + re.match(r"def\s+", header).end()  # ASCII up to here
    private = module.fresh(f"_{site.name}")
    rename = {(name_at, name_at + len(site.name)): private}
    end = module.span(statement)[1]
    wrapper = _step_def(site, options, module, {}, private)
    return {**remove_decorators, **rename, (end, end): "\n\n\n" + wrapper}


def _step_def(site: Site, options: list[str], module: ModuleInfo, inner_edits: dict,
              private: str | None = None) -> str:
    """`@jax.jit` (pmap's static and donated numbering) over `def name(params)` returning
    shard_map of the body (of a lambda of the mapped parameters only, with static ones)."""
    params = ", ".join(site.params)
    mapped = ", ".join(p for i, p in enumerate(site.params) if i not in site.static)
    if private is not None:
        inner = f"lambda {mapped}: {private}({params})" if site.static else private
    elif isinstance(site.function_node, ast.Lambda) and site.static:
        inner = f"lambda {mapped}: {module.render(*module.span(site.body.body), inner_edits)}"
    else:
        function = module.render(*module.span(site.function_node), inner_edits)
        simple = isinstance(site.function_node, (ast.Name, ast.Lambda, ast.Attribute))
        callee = function if simple else f"({function})"
        inner = f"lambda {mapped}: {callee}({params})" if site.static else function
    jit_options = []
    if site.static:
        static = site.static[0] if len(site.static) == 1 else _tuple([str(i) for i in site.static])
        jit_options.append(f"static_argnums={static}")
    if site.donate:
        jit_options.append(f"donate_argnums={site.donate}")
    line = module.source.splitlines()[site.statement.lineno - 1].decode("utf-8")
    indent = line[:len(line) - len(line.lstrip())]
    return step_def(site.name, params, inner, options, mapped, module.jax, module.partial,
                    jit_options, indent)


def _within(span, outer) -> bool:
    return outer[0] <= span[0] and span[1] <= outer[1]


def _source(module: ModuleInfo, node) -> str:
    start, end = module.span(node)
    return module.source[start:end].decode("utf-8")


def _own_returns(function: ast.FunctionDef):
    """The function's return statements, not those of functions nested in it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _site_text(site: Site, options: list[str], module: ModuleInfo, inner_edits: dict) -> str:
    """`jax.jit(jax.shard_map(f, mesh=..., ...))` where the site is built inside a function
    (the mesh is built when that code runs)."""
    jax = module.jax
    function = module.render(*module.span(site.node.args[0]), inner_edits)
    donate = f", donate_argnums={site.donate}" if site.donate else ""
    joined = ", ".join(options)
    text = f"{jax}.jit({jax}.shard_map({function}, {joined}){donate})"
    line = module.source.splitlines()[site.built.lineno - 1].decode("utf-8")
    indent = line[:len(line) - len(line.lstrip())]
    column = site.built.col_offset
    if column + len(text) > LINE_LIMIT and "\n" not in function:
        pad = indent + "    "
        lambda_node = site.node.args[0]
        if isinstance(lambda_node, ast.Lambda) and len(pad) + len(function) + 1 > \
                LINE_LIMIT and lambda_node.lineno == lambda_node.end_lineno:
            body = _multiline(module, lambda_node.body, inner_edits, pad, None)
            if body is not None:
                head = module.source[module.span(lambda_node)[0]:module.span(lambda_node.body)[0]]
                function = head.decode("utf-8") + body
        if len(pad) + len(joined) + 1 > LINE_LIMIT:
            joined = f",\n{pad}".join(options)
        text = f"{jax}.jit({jax}.shard_map(\n{pad}{function},\n{pad}{joined},\n{indent}){donate})"
    return text


class _MeshOnEntry(cst.CSTTransformer):
    """Each global caller that places values binds the mesh they go on, on entry:
    `mesh = _mesh("batch")` (and `mesh_j = _mesh("j")` for its other axes)."""

    def __init__(self, axes: dict[str, str], mesh_function: str, meshes: dict | None = None):
        super().__init__()
        self.axes = axes
        self.mesh_function = mesh_function
        self.meshes = meshes or {}  # caller -> ((name, axis), ...) of its other meshes
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return False

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef):
        self.depth -= 1
        name = original.name.value
        if self.depth or name not in self.axes or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        docstring = []
        if body and _is_docstring(body[0]):
            docstring = [body.pop(0)]
        code = cst.Module(body=body).code
        make = [cst.parse_statement(f"{mesh} = {self.mesh_function}({quoted(axis)})\n")
                for mesh, axis in ((MESH, self.axes[name]), *self.meshes.get(name, ()))
                if re.search(rf"(?<![\w.]){re.escape(mesh)}(?!\w)(?!\s*=[^=])", code)]
        if not make:
            return updated
        return updated.with_changes(body=updated.body.with_changes(body=[*docstring, *make, *body]))


class _MeshFunction(cst.CSTTransformer):
    """The module's `_mesh(axis_name)`, once, above its first function or class."""

    def __init__(self, text: str, import_functools: bool):
        super().__init__()
        self.statements = cst.parse_module(text).body
        self.import_functools = import_functools

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body = list(updated.body)
        if self.import_functools:
            body = _with_functools(body)
        at = next((i for i, s in enumerate(body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))),
                  len(body))
        first = self.statements[0]
        first = first.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) if at else first
        moved = body[at].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(),
                                                      *_comments(body[at])]) if at < len(body) else None
        rest = [moved, *body[at + 1:]] if moved is not None else []
        return updated.with_changes(body=[*body[:at], first, *self.statements[1:], *rest])


def _with_functools(body: list) -> list:
    """`import functools` first among the module's imports (after `__future__` ones), in the
    standard library's group: a blank line follows it when the next import is not stdlib."""
    def imported(statement) -> str | None:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        node = statement.body[0]
        if isinstance(node, cst.Import):
            return cst.Module(body=[]).code_for_node(node.names[0].name).split(".")[0]
        if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
            return cst.Module(body=[]).code_for_node(node.module).split(".")[0]
        return None

    at = next((i for i, s in enumerate(body) if imported(s) not in (None, "__future__")), None)
    if at is None:
        return body
    first = body[at]
    line = cst.parse_statement("import functools\n").with_changes(leading_lines=first.leading_lines)
    if imported(first) in sys.stdlib_module_names:
        return [*body[:at], line, first.with_changes(leading_lines=[]), *body[at + 1:]]
    return [*body[:at], line, first.with_changes(leading_lines=[cst.EmptyLine()]), *body[at + 1:]]


def _comments(statement) -> list:
    """The comment lines right above a statement (its blank lines are re-made)."""
    return [line for line in statement.leading_lines if line.comment is not None]


def _is_docstring(statement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _finding(blocker: Blocker) -> Finding:
    node = blocker.node
    return Finding(blocker.code, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                   blocker.message)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for finding in findings:
        key = (finding.code, finding.line, finding.col, finding.message)
        if key not in seen:
            seen.add(key)
            out.append(finding)
    return out
