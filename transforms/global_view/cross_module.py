"""Steps called from other modules of the paths given: decided with those callers.

Rule: a module-level pmap step that other modules of the run import by name
(`from train import step`) or call through the module (`train.step(...)`) goes global only when its callers in every module go global with
the same layouts; otherwise it keeps pmap's contract everywhere, and no importer's call of it
is edited.

Each member of the group (tree_uses.CrossModuleGroup: the home module and its importers)
runs the same joint decision from the same sources, so every worker reaches the same answer
with nothing exchanged between them (`-j N` stays parallel). The decision is a fixpoint of
whole global passes (rewrite.migrate_global with an explicit `CrossPlan`):
1. each importer is analysed with the home's live steps as its own sites (`foreign`): the
   steps whose calls there all go global give their usage (in_specs, result mode, axis);
2. the home is analysed with those steps' callers taken as followed (`followed`), its own
   callers of them included;
3. a step stays live when every importer and the home took it with one usage. Until
   nothing changes. The final plans are then emitted by each member for itself: the home
   writes the global step, each importer its own callers' edits.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping

from transforms.reading.names import ImportTable
from transforms.tree_uses import CrossModuleGroup, GroupMember


@dataclasses.dataclass(frozen=True)
class CrossPlan:
    """What one member's global pass takes from the group's decision."""

    # home: step name -> (its usage by the callers in other modules, those modules)
    followed: Mapping[str, tuple[tuple, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    # importer: the home's steps whose calls here are analysed (and go global), and the home
    foreign: frozenset[str] = frozenset()
    home_source: bytes = b""
    # importer: the dotted names that mean the home module there (`steps.train_step(...)`)
    aliases: frozenset[str] = frozenset()
    # home: step name -> why its calls in another module cannot go global (`path:line: ...`)
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # the group's decision, not a trial of it: the pass must reproduce it exactly
    final: bool = False


class CrossModuleMismatch(RuntimeError):
    """A member's pass did not reproduce the group's decision: emitting would put a step and
    its callers in different layouts, so the run stops on this file instead."""


# The rules a step must meet to be decided across modules (everything else keeps the
# contract as before): options whose rewrite reads only the step's own module.
def eligible(site) -> bool:
    return (site.owner is None and not site.holder and not site.factory and not site.inline
            and not site.static and not site.placement
            and site.out_tree is None and not site.out_none and not site.keyword_params
            and not site.opaque and site.rebinds is None and site.outer_jit is None
            and site.replaced is None
            and all(axis in (0, None) for axis in site.in_axes))


_PLANS: dict[tuple, dict[str, CrossPlan]] = {}


def plan_for(group: CrossModuleGroup, display: str, target, helper_module) -> CrossPlan | None:
    """The member `display`'s part of the group's decision (computed once per process)."""
    key = (group.key, target, helper_module)
    if key not in _PLANS:
        if len(_PLANS) > 16:
            _PLANS.clear()
        _PLANS[key] = _decide(group, target, helper_module)
    return _PLANS[key].get(display)


def _decide(group: CrossModuleGroup, target, helper_module) -> dict[str, CrossPlan]:
    from transforms.global_view.rewrite import migrate_global

    home, importers = group.members[0], group.members[1:]
    live = set(group.names) & _eligible_steps(home.source)
    # An importer whose module binds an imported step's name elsewhere too (a def, an
    # assignment, a parameter, a second import): its reads may not mean the step. One that
    # reads it only as `steps.name` must not name it otherwise: its analysis reads those
    # attributes as the bare name (`as_names`).
    for member in importers:
        live -= {name for name in member.imports & live
                 if not _bound_once(member.source, name)
                 and not (member.aliases and _never_named(member.source, name))}
    accepted: dict[str, tuple] = {}
    reasons: dict[str, str] = {}  # the first reason each refused step was refused for
    while live:
        usages: dict[str, set] = {name: set() for name in live}
        refused: set[str] = set()
        for member in importers:
            names = member.imports & live
            if not names:
                continue
            result = migrate_global(member.source, target, helper_module,
                                    context=member.context,
                                    cross=CrossPlan(foreign=frozenset(names),
                                                    home_source=home.source,
                                                    aliases=member.aliases))
            for name in names:
                if name in result.usages:
                    usages[name].add(result.usages[name])
                else:
                    refused.add(name)
                    line, why = result.foreign_blocked.get(
                        name, (None, "a caller there keeps pmap's layout"))
                    reasons.setdefault(name, f"{member.display}"
                                       f"{f':{line}' if line is not None else ''}: {why}")
        agreed = {name: next(iter(found)) for name, found in usages.items()
                  if name not in refused and len(found) == 1}
        for name in live - refused - set(agreed):
            reasons.setdefault(name, "its callers in the other modules pass different layouts")
        result = migrate_global(home.source, target, helper_module, context=home.context,
                                cross=CrossPlan(followed=_followed(agreed, importers)))
        accepted = {name: usage for name, usage in agreed.items()
                    if name in result.global_sites and result.usages.get(name) == usage}
        for name in set(agreed) - set(accepted):
            if name in result.global_sites:
                reasons.setdefault(name, "its callers in this module pass other layouts "
                                   "than those in the other modules")
        if set(accepted) == live:
            break
        live = set(accepted)
    refused = {name: why for name, why in reasons.items() if name not in accepted}
    plans = {home.display: CrossPlan(followed=_followed(accepted, importers), refused=refused,
                                     final=True)}
    for member in importers:
        names = member.imports & set(accepted)
        if names:
            plans[member.display] = CrossPlan(foreign=frozenset(names),
                                              home_source=home.source,
                                              aliases=member.aliases, final=True)
    return plans


def _followed(usages: dict[str, tuple], importers: tuple[GroupMember, ...]):
    return {name: (usage, tuple(m.display for m in importers if name in m.imports))
            for name, usage in usages.items()}


def _eligible_steps(source: bytes) -> set[str]:
    sites, _ = home_sites(source)
    return {s.name for s in sites if eligible(s)}


def home_sites(source: bytes):
    """(the home module's sites, its parsed tree and import table)."""
    from transforms.global_view.site_discovery import find_sites

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return [], None
    table = ImportTable.from_tree(tree)
    sites, _ = find_sites(tree, table.imported, top_level=True)
    return sites, (tree, table)


def foreign_sites(plan: CrossPlan):
    """The home's steps `plan.foreign`, as sites an importer's analysis calls by their names,
    with the home's ModuleInfo, which reads their bodies and answers what its own text
    decides (ModuleInfo.homes): (sites, the home's ModuleInfo or None)."""
    from transforms.global_view.module_info import ModuleInfo

    sites, parsed = home_sites(plan.home_source)
    chosen = [s for s in sites if s.name in plan.foreign and eligible(s)]
    if not chosen:
        return [], None
    tree, table = parsed
    home = ModuleInfo(plan.home_source, tree, table)
    home.sites = {s.key: s for s in sites}
    return chosen, home


def adopt(module, foreign, home) -> None:
    """Make `module` (an importer's ModuleInfo) read the foreign sites through `home`."""
    for site in foreign:
        module._bodies[site.key] = home.body_analysis(site)
        module.homes[id(site.body)] = home


class _AsNames(ast.NodeTransformer):
    def __init__(self, aliases: frozenset[str], names: frozenset[str]):
        self.aliases, self.names = aliases, names

    def visit_Attribute(self, node: ast.Attribute):
        if node.attr in self.names and isinstance(node.ctx, ast.Load) \
                and _dotted(node.value) in self.aliases:
            return ast.copy_location(ast.Name(id=node.attr, ctx=ast.Load()), node)
        return self.generic_visit(node)


def as_names(tree: ast.Module, plan: CrossPlan) -> ast.Module:
    """An importer's reads `steps.name` of the home's steps (`plan.foreign`), as the bare
    names its analysis calls the foreign sites by. The Name keeps the attribute's span, so
    an edit of the call keeps the text as written; `_never_named` made sure the bare name
    means nothing else there."""
    if not plan.aliases or not plan.foreign:
        return tree
    return ast.fix_missing_locations(_AsNames(plan.aliases, plan.foreign).visit(tree))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _never_named(source: bytes, name: str) -> bool:
    """`name` is not an identifier the module binds or reads by itself."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            named = node.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                               ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            named = node.name
        elif isinstance(node, ast.arg):
            named = node.arg
        elif isinstance(node, ast.alias):
            named = (node.asname or node.name).split(".")[0]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            named = name if name in node.names else None
        elif isinstance(node, ast.MatchMapping):
            named = node.rest
        else:
            continue
        if named == name:
            return False
    return True


def _bound_once(source: bytes, name: str) -> bool:
    """`name` is bound in the module only by one module-level `from ... import name`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return False
    bindings = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bindings += sum((a.asname or a.name.split(".")[0]) == name for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bindings += 2 * (node.name == name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bindings += 2 * (node.id == name)
        elif isinstance(node, ast.arg):
            bindings += 2 * (node.arg == name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bindings += 2 * (name in node.names)
        elif isinstance(node, ast.alias):
            pass
        elif isinstance(node, (ast.ExceptHandler,)) and node.name == name:
            bindings += 2
        elif isinstance(node, ast.MatchAs) and node.name == name:
            bindings += 2
    return bindings == 1
