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
import tokenize

import libcst as cst

from transforms.codes.findings import Finding
from transforms.codes.global_view import (
    CONSUMER_UNKNOWN,
    FALLS_BACK_WITH_CALLER,
    PRODUCER_UNKNOWN,
    SITE,
    UNAVAILABLE,
)
from transforms.faithful.multiprocess import first_evidence
from transforms.global_view.axes import MESH
from transforms.global_view.callers import (
    called_function_names,
    callers_of,
    faithful_callee,
    find_callers,
    inside,
)
from transforms.global_view.classes import faithful_class_use
from transforms.global_view.dataflow import CallerAnalysis, CallerResult
from transforms.global_view.hoist import hoist_local_sites
from transforms.global_view.layout import FunctionLayout
from transforms.global_view.module_info import ModuleInfo
from transforms.global_view.multiprocess import (
    NAMES as MULTIPROCESS_NAMES,
    MultiProcessCallerAnalysis,
    host_barrier_sites,
    process_idiom_findings,
)
from transforms.global_view.post_passes import (
    MeshFunction,
    MeshOnEntry,
    hoist_key,
    with_hoisting_noted,
)
from transforms.global_view.process_dependence import ProcessDependence
from transforms.global_view.site_edits import (
    compose,
    global_site_edits,
    out_specs_text,
    site_usage,
    within,
)
from transforms.global_view.site_discovery import find_sites
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.step_text import MESH_FUNCTION_TEXT
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    MERGED_OUT,
    MESH_PLACEHOLDER,
    SCALARS_OUT,
    STACKED_OUT,
    quoted,
    stacked_axis,
    tuple_text,
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
    callers, blocked = find_callers(tree, by_name, faithful)
    module.callers = set(callers)
    results: dict[str, CallerResult] = {}
    blocked_callers: dict[str, Blocker] = {}
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    called_names = called_function_names(tree)
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
                    faithful_call = faithful_callee(
                        functions[caller], functions, callers, blocked_callers, table.imported,
                        {s.name for s in sites if s.owner is None and s.key not in blocked},
                        barrier_pmaps) or faithful_class_use(
                        functions[caller], tree, table.imported, sites, blocked,
                        lambda method: faithful_callee(
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
            seen = {site_usage(results[c], name) for c in callers_of(name, callers)
                    if c in results}
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
            if blocker.node is site.node or inside(blocker.node, site.statement):
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
            MESH_PLACEHOLDER, MESH if within(k, own) else elsewhere)
            for k, v in result.edits.items()})
    site_edits: dict[tuple[int, int], str] = {}
    module.under_other_mesh = {key for r in results.values() for key, axis in r.site_axes.items()
                               if axis != r.axis}
    for site in global_sites:
        first_caller = next(results[c] for c in callers_of(site.key, callers))
        specs, mode, axis = site_usage(first_caller, site.key)
        modes = mode if isinstance(mode, tuple) else (mode,)
        out_specs = out_specs_text(site, mode, axis)
        site_edits.update(global_site_edits(site, specs, out_specs, mode, module, axis))
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
            f"in_specs {tuple_text(specs)} and out_specs {out_specs}; its callers "
            f"({', '.join(sorted(callers_of(site.key, callers)))}) pass global arrays{kept}"))
    conflict = compose(edits, site_edits, module)
    if conflict is not None:
        site = next(s for s in global_sites if within(conflict, module.span(s.statement))
                    or within(module.span(s.built), conflict)) if global_sites else None
        node = site.node if site is not None else tree
        return GlobalResult(source, _dedupe([f for f in findings if f.code != SITE] + [
            _finding(Blocker(CONSUMER_UNKNOWN, node,
                             "a caller's edit and this site's edit overlap in a "
                             "way the rewrite cannot join: the module stays faithful"))]))
    text = module.render(0, len(source), edits)
    new_module = cst.parse_module(text.encode("utf-8"))
    new_module = new_module.visit(MeshOnEntry({c: r.axis for c, r in results.items()},
                                              module.mesh_function,
                                              {c: r.meshes for c, r in results.items()}))
    functools = next((n for n, full in table.imported.items() if full == "functools"), None)
    new_module = new_module.visit(MeshFunction(MESH_FUNCTION_TEXT.format(
        functools=functools or "functools", name=module.mesh_function, jax=module.jax),
        import_functools=functools is None))
    keys = [(s, hoist_key(s)) for s in global_sites]
    assigned = {k for s, k in keys if k is not None and not s.inline}
    inline = {k for s, k in keys if k is not None and s.inline}
    params = {k: ", ".join(s.params) for s, k in keys if k is not None}
    hoisted, moved = hoist_local_sites(new_module.code, module.jax, assigned, inline, params,
                                       module.partial)
    if moved:
        new_module = cst.parse_module(hoisted.encode("utf-8"))
        findings = with_hoisting_noted(findings, global_sites, moved)
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
