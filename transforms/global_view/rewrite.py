"""The global-view pass over one module (`migrate_global`): the driver.

It finds the sites (site_discovery.py), rules out modules the style cannot take, decides which
sites and callers go global (fixpoint.py: sites and their callers fall back together, so no
value ever crosses between the two layouts), and composes the edits. What goes global:
- the site: `jax.jit` (with pmap's donate_argnums) over
  `jax.shard_map(body, mesh=_mesh(axis), in_specs, out_specs=P(), check_vma=False)`, body
  unchanged (site_edits.py). At module level that is a jitted def (step_text.py), so the mesh is
  built at the first call: `_mesh` is the module's cached 1-D mesh over all devices, never
  built at import (post_passes.py);
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

from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.codes.global_view import (
    CONSUMER_UNKNOWN,
    CONTRACT,
    FALLS_BACK_WITH_CALLER,
    OPTIONS,
    PROCESS_IDIOM_KEPT,
    SITE,
    UNAVAILABLE,
)
from transforms.faithful.multiprocess import first_evidence
from transforms.global_view.method_locals import method_callers
from transforms.global_view.callers import (
    MODULE_CALLER,
    mark_reads_before_binding,
    top_level_function,
)
from transforms.global_view.contract import contract_sites
from transforms.global_view.nested_sites import (
    NESTED_BLOCKER,
    nested_sites,
    rewrite_nested_sites,
)
from transforms.global_view.nested_sites import migrated_finding as nested_migrated_finding
from transforms.global_view.cross_module import (
    CrossModuleMismatch,
    CrossPlan,
    adopt,
    as_names,
    foreign_sites,
    plan_for,
)
from transforms.global_view.dataflow import CallerAnalysis
from transforms.global_view.fixpoint import decide
from transforms.global_view.layout import FunctionLayout
from transforms.global_view.module_info import ModuleInfo
from transforms.global_view.multiprocess import (
    NAMES as MULTIPROCESS_NAMES,
    MultiProcessCallerAnalysis,
    host_barrier_sites,
    process_idiom_findings,
)
from transforms.global_view.post_passes import finish_module
from transforms.global_view.process_dependence import ProcessDependence
from transforms.global_view.site_discovery import find_sites
from transforms.global_view.site_edits import (
    caller_edits,
    compose,
    global_site_edits,
    out_specs_text,
    site_usage,
    stacked_positions,
    within,
)
from transforms.global_view.site_findings import (
    blocker_finding,
    dedupe,
    fallback_findings,
    migrated_finding,
    stacked_findings,
)
from transforms.global_view.sites import Blocker
from transforms.global_view.values import literals_quoted_as, module_quote
from transforms.reading.names import ImportTable
from transforms.suppressions import Suppressions
from transforms.target import TargetJax
from transforms.tree_uses import NO_TREE, TreeContext

MIN_TARGET = TargetJax(0, 7, 0)  # jax.shard_map, jax.make_mesh(axis_types=...)


@dataclasses.dataclass
class GlobalResult:
    source: bytes
    findings: list[Finding]
    layouts: tuple[FunctionLayout, ...] = ()
    global_sites: tuple[str, ...] = ()
    # site name -> (in_specs, result mode, axis): the home's global steps another module calls,
    # as its own callers use them; in an importer, the home's steps whose calls here go global
    # (cross_module.py)
    usages: dict[str, tuple] = dataclasses.field(default_factory=dict)
    # in an importer: the home's steps whose calls here cannot go global -> (the line of the
    # blocker here, or None, and why)
    foreign_blocked: dict[str, tuple] = dataclasses.field(default_factory=dict)


def migrate_global(source: bytes, target: TargetJax, helper_module: str | None = None,
                   top_level: bool = True, context: TreeContext = NO_TREE,
                   cross: CrossPlan | None = None) -> GlobalResult:
    """The module with every recognised program rewritten to the global view; findings say
    which sites went global (PM600) and why each other one did not (PM601-PM612).
    `helper_module`: the contract functions are imported from there instead of defined here.
    `top_level`: the module's top-level code is a caller of its sites (callers.py); off, the
    sites it calls keep pmap's contract (a notebook whose IPython lines read its names).
    `context`: what the other modules of the run tell about this one
    (transforms/tree_uses.py): the names they use keep the contract their users call them
    by, and what their functions it calls return is known; where it is one of a group of
    modules whose steps are decided together, `cross` is its part of that decision
    (cross_module.py; computed from `context.group` when not given)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return GlobalResult(source, [])
    if cross is None and context.group is not None:
        cross = plan_for(context.group, context.member, target, helper_module)
    with literals_quoted_as(module_quote(tree, source)):  # the module's quotes, for what it gets
        result = _migrate_parsed(source, tree, target, helper_module, top_level, context, cross)
        result = _with_nested_sites(result, tree)
    if cross is not None and cross.final:
        planned = set(cross.followed) | set(cross.foreign)
        if not planned <= set(result.usages):
            raise CrossModuleMismatch(
                f"the steps {sorted(planned - set(result.usages))} decided global with their "
                "callers in other modules did not go global in this module's own pass")
    return result


def _migrate_parsed(source: bytes, tree: ast.Module, target: TargetJax,
                    helper_module: str | None, top_level: bool,
                    context: TreeContext, cross: CrossPlan | None) -> GlobalResult:
    table = ImportTable.from_tree(tree)
    # A process-0 guard around logging alone does not make the module multi-process here.
    multiprocess = first_evidence(tree, table.imported, guards_count=False) is not None
    top_level = top_level and not multiprocess
    if multiprocess or not top_level:
        cross = None  # steps of a multi-process module or a notebook are not decided across
    sites, blockers = find_sites(tree, table.imported, top_level=top_level)
    # Host barriers become sync_global_devices in the faithful rules, with no pmap left.
    barriers = host_barrier_sites(sites, tree, table.imported)
    barrier_pmaps = {id(n) for s in sites if s.key in barriers for n in ast.walk(s.node)}
    sites = [s for s in sites if s.key not in barriers]
    # A site under `# pmap-migrate: ignore` is left as written, for the faithful rules to
    # report (PM011); its callers keep pmap's layout with it.
    suppressed = _suppressed(source, sites)
    barrier_pmaps |= {id(n) for s in suppressed for n in ast.walk(s.node)}
    sites = [s for s in sites if s not in suppressed]
    kept_as_written = [Blocker(FALLS_BACK_WITH_CALLER, s.node, f"{s.label} is under a "
                               "`# pmap-migrate: ignore` comment", names=[s.name])
                       for s in suppressed]
    # The home's steps this module calls, read as its own sites (cross_module.py)
    foreign, home = foreign_sites(cross) if cross is not None and cross.foreign \
        else ([], None)
    if foreign:  # `steps.train_step(...)` read as a call of the foreign site by its name
        tree = as_names(tree, cross)
    if {s.key for s in foreign} & {s.key for s in sites}:
        foreign = []
    own_sites = sites
    sites = sites + foreign
    if not sites and not blockers:
        return GlobalResult(source, [])
    module_blocker = _encoding_blocker(source) or _module_blocker(tree, table, target, multiprocess)
    if module_blocker is not None:
        nodes = [s.node for s in sites] + [b.node for b in blockers]
        return GlobalResult(source, [blocker_finding(Blocker(UNAVAILABLE, n, module_blocker))
                                     for n in nodes])
    followed = cross.followed if cross is not None else {}
    module = ModuleInfo(source, tree, table, helper_module, context, frozenset(followed),
                        cross.refused if cross is not None else {})
    adopt(module, foreign, home)
    if any(s.donate for s in foreign):  # its producers unstack to fresh buffers (ModuleInfo)
        module.donating = True
    analysis = CallerAnalysis
    if multiprocess:  # see global_view/multiprocess.py
        module.process_dependence = ProcessDependence(tree, table.imported)
        module.sometimes_called = module.process_dependence.sometimes_called()
        analysis = MultiProcessCallerAnalysis
    findings = [blocker_finding(b) for b in blockers]
    module.sites = {s.key: s for s in sites}
    code = top_level_function(tree, sites) if top_level else None
    if code is not None:
        mark_reads_before_binding(tree, sites)
    if code is not None:
        module.functions[MODULE_CALLER] = code
    owners = {s.owner for s in sites}  # methods whose own pmaps are sites: callers of their own
    module.functions.update({name: method for name, method in method_callers(tree).items()
                             if name in owners})
    module.nested_steps = _global_nested_steps(tree, table, blockers, multiprocess)
    # One site's blocker sends only that site to pmap's contract (single-process modules).
    decision = decide(module, sites, blockers + kept_as_written, analysis, barrier_pmaps,
                      demote=not multiprocess)
    results, blocked = decision.results, decision.blocked
    findings += fallback_findings(own_sites, blocked)
    global_sites = [s for s in own_sites if s.key not in blocked]
    module.under_other_mesh = {key for r in results.values() for key, axis in r.site_axes.items()
                               if axis != r.axis}
    usages, foreign_blocked = _foreign_usages(foreign, decision, module)
    # The floor: pmap's calling contract for what the analysis left (contract.py).
    taken = [module.span(s.statement) for s in global_sites] + \
        [module.span(s.built) for s in global_sites]
    contracts, findings, _ = contract_sites(module, taken, barrier_pmaps, findings, multiprocess)
    # What the contract functions need (contract_text.py); None: the module has no such site.
    contract_features = frozenset(
        ({"multiprocess"} if multiprocess else set())
        | ({"devices"} if any(c.site.devices for c in contracts) else set())
    ) if contracts else None
    if not global_sites and not contracts and not usages:
        return GlobalResult(source, dedupe(findings), foreign_blocked=foreign_blocked)
    for caller in sorted(results) if multiprocess else ():
        findings += [Finding(PROCESS_IDIOM_KEPT, node.lineno, node.col_offset + 1, message)
                     for node, message in process_idiom_findings(module.functions[caller],
                                                                 module)]
    edits = caller_edits(results, module)
    site_edits: dict[tuple[int, int], str] = {}
    for site in global_sites:
        first_caller = next((results[c] for c in decision.callers_of(site.key)), None)
        usage = site_usage(first_caller, site.key) if first_caller is not None \
            else followed[site.name][0]  # called only from other modules
        if site.name in followed:
            usages[site.name] = usage
        specs, stacked = stacked_positions(site, usage[0])
        if len(specs) + len(site.static) < len(site.params):  # defaults fill the rest
            site.passed = len(specs) + len(site.static)
        _, mode, axis = usage
        out_specs = out_specs_text(site, mode, axis)
        site_edits.update(global_site_edits(site, specs, out_specs, mode, module, axis, stacked))
        findings.append(migrated_finding(
            site, specs, out_specs, mode, axis, decision, module, multiprocess,
            vmapped=bool(stacked) and isinstance(site.body, ast.Lambda),  # site_calls.vmapped_lambda
            elsewhere=followed.get(site.name, (None, ()))[1]))
    findings += stacked_findings(results)
    site_edits.update({contract.span: contract.text for contract in contracts})
    conflict = compose(edits, site_edits, module)
    if conflict is not None:
        site = next(s for s in global_sites if within(conflict, module.span(s.statement))
                    or within(module.span(s.built), conflict)) if global_sites else None
        node = site.node if site is not None else tree
        return GlobalResult(source, dedupe([f for f in findings if f.code != SITE] + [
            blocker_finding(Blocker(CONSUMER_UNKNOWN, node,
                                    "a caller's edit and this site's edit overlap in a "
                                    "way the rewrite cannot join: the module stays faithful"))]))
    new_module, findings = finish_module(module.render(0, len(source), edits), module, results,
                                         global_sites, findings, contract_features,
                                         helper_module, mesh_needed=bool(usages))
    layouts = tuple(FunctionLayout(c, r.layouts) for c, r in sorted(results.items()) if r.layouts)
    # a function that only returns a global caller's result hands out the same layouts
    layouts += tuple(FunctionLayout(entry, results[c].layouts)
                     for c, entries in sorted(decision.handed_on.items())
                     for entry in entries if results[c].layouts)
    return GlobalResult(new_module.bytes, dedupe(findings), layouts,
                        tuple(s.key for s in global_sites), usages, foreign_blocked)


def _global_nested_steps(tree: ast.Module, table: ImportTable, blockers: list[Blocker],
                         multiprocess: bool) -> frozenset[str]:
    """The nested pmaps that `_with_nested_sites` writes in the global style: functions a
    global caller may call (fixpoint.decide). Their 2-D form takes and returns what pmap's
    did, so a caller that hands them only values it leaves as the original had them
    (CallKindsMixin._nested_step_call refuses any other) gets what the original got.
    Single-process modules only: nested_sites judges a multi-process one by what reaches it,
    not by its callers."""
    if multiprocess or not any(isinstance(s, ast.FunctionDef) and len(s.decorator_list) >= 2
                               for s in tree.body):
        return frozenset()
    found = {(b.node.lineno, b.node.col_offset) for b in blockers
             if b.message.startswith(NESTED_BLOCKER)}
    sites, _ = nested_sites(tree, table.imported, multiprocess)
    return frozenset(s.function.name for s in sites
                     if (s.decorator.lineno, s.decorator.col_offset) in found)


def _with_nested_sites(result: GlobalResult, tree: ast.Module) -> GlobalResult:
    """`result` with the nested pmaps the main pass kept on pmap's layout (its PM602 "a nested
    pmap") written as one shard_map over a 2-D mesh where they can be (nested_sites.py), and
    the reason in that PM602 where they cannot. Their callers are the main pass's as they are:
    the 2-D form takes and returns pmap's rows."""
    if not any(isinstance(s, ast.FunctionDef) and len(s.decorator_list) >= 2 for s in tree.body):
        return result
    table = ImportTable.from_tree(tree)
    multiprocess = first_evidence(tree, table.imported, guards_count=False) is not None
    sites, refused = nested_sites(tree, table.imported, multiprocess)
    blocked = {(f.line, f.col) for f in result.findings
               if f.code == OPTIONS and f.message.startswith(NESTED_BLOCKER)}
    sites = [s for s in sites if (s.decorator.lineno, s.decorator.col_offset + 1) in blocked]
    refused = [f for f in refused if (f.line, f.col) in blocked]
    source, done = rewrite_nested_sites(result.source, tree, sites, table.imported) \
        if sites else (result.source, [])
    replaced = {(f.line, f.col): f for f in [*refused, *map(nested_migrated_finding, done)]}
    findings = [replaced.get((f.line, f.col), f) if f.code == OPTIONS
                and f.message.startswith(NESTED_BLOCKER) else f for f in result.findings]
    for site in done:  # the callers that kept pmap's rows for it: not for a faithful callee now
        name = site.function.name
        said = f"`{name}`, which keeps pmap code in the faithful style; it would run under " \
            "this function's mesh"
        meant = f"`{name}`, a nested pmap whose 2-D form takes pmap's rows, so they are kept"
        findings = [dataclasses.replace(f, message=f.message.replace(said, meant))
                    if said in f.message else f for f in findings]
    return dataclasses.replace(result, source=source, findings=findings)


def _foreign_usages(foreign, decision, module: ModuleInfo):
    """The home's steps (cross_module.py) whose every call here goes global, each with the
    one usage its callers here give it, on the mesh of each caller's own axis; and why each
    other one cannot ((the line of this module where the blocker is, or None; why))."""
    usages, blocked = {}, {}
    own = {id(n) for n in ast.walk(module.tree)} if foreign else set()
    for site in foreign:
        callers = decision.callers_of(site.key)
        blocker = decision.blocked.get(site.key)
        if blocker is not None:
            line = blocker.node.lineno if id(blocker.node) in own else None
            blocked[site.name] = (line, blocker.message)
            continue
        if not callers or any(c not in decision.results for c in callers) \
                or site.key in module.under_other_mesh:
            blocked[site.name] = (None, "a caller there keeps pmap's layout")
            continue
        seen = {site_usage(decision.results[c], site.key) for c in callers}
        if len(seen) == 1:
            usages[site.name] = seen.pop()
        else:
            blocked[site.name] = (None, "its callers there pass different layouts")
    return usages, blocked


def _suppressed(source: bytes, sites) -> list:
    """The sites a `# pmap-migrate: ignore` comment covers (on their line or the line above),
    bare or naming a code a site's rewrite reports (PM100, PM600, PM612)."""
    if b"pmap-migrate:" not in source:
        return []
    comments = Suppressions.from_source(source)
    codes = (Code.PMAP_MIGRATED, SITE, CONTRACT)
    return [s for s in sites
            if any(comments.covers(s.node.lineno, code) for code in codes)]


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
    if table.ambiguous:
        return "the module's imports are ambiguous (a name bound twice, or a star import)"
    # NamedSharding names every placement's mesh; multihost_utils reads per-process rows back.
    names = ("P", "AxisType", "NamedSharding", *(MULTIPROCESS_NAMES if multiprocess else ()))
    for name in dict.fromkeys(names):
        origin = "jax.experimental" if name == "multihost_utils" else "jax.sharding"
        if name in table.bound_otherwise or (
                name in table.imported and not table.imported[name].startswith(origin)):
            return f"the name `{name}` the global style imports is already used in the module"
    return None
