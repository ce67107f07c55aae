"""The paths given are one program: which module-level names of a module other modules of the
same tree use (`from train_lib import train_step`, `import train_lib as tl; tl.train_step`).

The global style rewrites a site together with the callers it can see. A module-level name
another module uses has callers the per-module analysis cannot see, so it must keep the
contract its users rely on (callers.py, dataflow.py). Pure: sources and their dotted names
in, uses out; the paths and the dotted names are the runner's (migrator/tree_index.py).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Mapping

from transforms.reading.names import ImportTable, dotted

# The global pass runs only on a module whose text names pmap (transforms/pipeline.py).
_PMAP = b"pmap"

# Every public name of the module: a star import, or the module object itself handed around
# (`run(train_lib)`, `getattr(train_lib, name)`), whose attributes cannot be listed.
EVERY_NAME = "*"


@dataclasses.dataclass(frozen=True)
class TreeModule:
    display: str  # how findings name the file
    dotted: tuple[str, ...]  # the names it is imported by (`pkg.train`, and `train` from its folder)
    source: bytes
    package: bool = False  # an `__init__.py`: relative imports resolve inside it
    # A notebook's code cells joined: the first line of each cell, so a use is named by its
    # cell (1-based, as Jupyter numbers them) rather than a line of the joined text.
    cell_starts: tuple[int, ...] = ()

    def where(self, line: int) -> str:
        if not self.cell_starts:
            return f"{self.display}:{line}"
        cell = sum(1 for start in self.cell_starts if start <= line)
        return f"{self.display} cell {cell}"


@dataclasses.dataclass
class TreeFacts:
    # display of a module that may hold pmap code -> {name other modules use: where the
    # first use is, `path:line`}
    uses: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    # display of an importer -> {the called name as its import table spells it: the kind of
    # value the function returns} (`_device_order_values`)
    values: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    # display of a module that may hold pmap code -> {name: the importers whose every use of
    # it is one module-level `from <module> import name` (a .py module, no alias)}
    plain: dict[str, dict[str, set[str]]] = dataclasses.field(default_factory=dict)
    # display of such a module -> its names used any other way (an alias, a function-level
    # import, a notebook's import, the module as a value: EVERY_NAME)
    other: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    # display of an importer -> {display of a module it uses by attribute: the dotted names
    # that mean that module there (`steps` for `from pkg import steps`, `pkg.steps` for
    # `import pkg.steps`)}, where its uses `steps.name` count as plain (`plain`)
    aliases: dict[str, dict[str, set[str]]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GroupMember:
    """A module of a cross-module group, as its own migration would see it."""

    display: str
    source: bytes
    context: "TreeContext"  # its own context, without the group
    imports: frozenset[str] = frozenset()  # the home's names it imports (empty for the home)
    # the dotted names that mean the home module there, where it calls `steps.name(...)`
    aliases: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class CrossModuleGroup:
    """A module whose module-level pmap steps (`names`) other modules of the run call, with
    those modules: each member's migration decides the group's steps jointly
    (transforms/global_view/cross_module.py), from the same sources, so all agree."""

    home: str  # display of the module that defines the steps
    names: frozenset[str]
    members: tuple[GroupMember, ...]  # the home first, then its importers by display

    @property
    def key(self) -> tuple:
        return (self.home, self.names, tuple((m.display, m.imports, m.source)
                                             for m in self.members))


@dataclasses.dataclass(frozen=True)
class TreeContext:
    """What one module's migration learns from the rest of the run."""

    # module-level name -> where another module uses it (`path:line`)
    used_elsewhere: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # a called name as the module's import table spells it -> the kind of value it returns
    imported_values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The cross-module group the module belongs to (as the home of steps other modules call,
    # or as one of those modules), and the module's display in it
    group: CrossModuleGroup | None = None
    member: str = ""


NO_TREE = TreeContext()


def contexts(facts: TreeFacts, modules: Iterable[TreeModule] = ()) -> dict[str, TreeContext]:
    """display -> the module's TreeContext, for modules with something to know. `modules`:
    the run's modules, whose sources the cross-module groups carry."""
    found = {display: TreeContext(facts.uses.get(display, {}), facts.values.get(display, {}))
             for display in {*facts.uses, *facts.values}}
    by_display = {m.display: m for m in modules}
    groups = list(cross_module_groups(facts, by_display))
    for group in groups:
        # An importer's own names other modules use (it may name no pmap, so the facts do
        # not list them): what its callers return there, a step it passes on, are seen.
        for member in group.members[1:]:
            uses = _uses_of(by_display[member.display], by_display.values())
            if uses:
                own = found.get(member.display, NO_TREE)
                found[member.display] = dataclasses.replace(
                    own, used_elsewhere={**uses, **own.used_elsewhere})
    for group in groups:
        members = tuple(dataclasses.replace(m, context=found.get(m.display, NO_TREE))
                        for m in group.members)  # each analysed as its own run sees it
        group = dataclasses.replace(group, members=members)
        for member in group.members:
            own = found.get(member.display, NO_TREE)
            found[member.display] = dataclasses.replace(own, group=group, member=member.display)
    return found


def cross_module_groups(facts: TreeFacts, modules: Mapping[str, TreeModule]):
    """The groups whose steps are decided across modules: a module's module-level pmap steps
    (a pmap-decorated def, or `name = ...pmap...`) whose every use in another module is a
    plain module-level `from <module> import name`, or a read `module.name` through a name
    only a module-level import binds, in a .py module. An importer of such
    steps from more than one module, or that is itself a group's home, is left out (its uses
    keep the steps it imports on pmap's contract, as before)."""
    candidates: dict[str, dict[str, set[str]]] = {}
    for home, names in sorted(facts.plain.items()):
        if home not in modules:
            continue
        other = facts.other.get(home, set())
        steps = _module_level_steps(modules[home].source)
        # A module handed around as a value (EVERY_NAME) may reach any name, private ones
        # too where some importer holds the module itself (`steps.train_step(...)`).
        by_attribute = any(home in facts.aliases.get(i, {}) for i in modules)
        chosen = {name: importers for name, importers in names.items()
                  if name in steps and name not in other
                  and ((name.startswith("_") and not by_attribute) or EVERY_NAME not in other)}
        if chosen:
            candidates[home] = chosen
    homes_of: dict[str, set[str]] = {}
    for home, names in candidates.items():
        for importers in names.values():
            for importer in importers:
                homes_of.setdefault(importer, set()).add(home)
    left_out = {m for m, homes in homes_of.items() if len(homes) > 1 or m in candidates}
    for home, names in sorted(candidates.items()):
        names = {n: i for n, i in names.items() if not i & left_out}
        if not names:
            continue
        importers = sorted({i for group in names.values() for i in group})
        members = [GroupMember(home, modules[home].source, NO_TREE)] + [
            GroupMember(i, modules[i].source, NO_TREE,
                        frozenset(n for n, group in names.items() if i in group),
                        frozenset(facts.aliases.get(i, {}).get(home, ())))
            for i in importers]
        yield CrossModuleGroup(home, frozenset(names), tuple(members))


def _uses_of(target: TreeModule, modules: Iterable[TreeModule]) -> dict[str, str]:
    """name of `target` -> where another module of the run first uses it (`path:line`)."""
    targets = {name: target for name in target.dotted}
    found: dict[str, str] = {}
    if not targets:
        return found
    for module in modules:
        if module is target or not _imports_any(module, targets):
            continue
        try:
            tree = ast.parse(module.source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for _, name, node in _uses_in(tree, module, targets):
            found.setdefault(name, module.where(node.lineno))
    return found


def _module_level_steps(source: bytes) -> set[str]:
    """Module-level names bound by a def with a decorator naming pmap, or by an assignment
    whose value names pmap: what may be a step (site discovery decides)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    found = set()
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and any(
                "pmap" in ast.dump(d) for d in statement.decorator_list):
            found.add(statement.name)
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) and "pmap" in ast.dump(statement.value):
            found.add(statement.targets[0].id)
    return found


def uses_across_modules(modules: Iterable[TreeModule]) -> dict[str, dict[str, str]]:
    """`tree_facts(modules).uses`."""
    return tree_facts(modules).uses


def tree_facts(modules: Iterable[TreeModule]) -> TreeFacts:
    """What each module of the run uses of the others. The global pass acts only on modules
    that name pmap: their names other modules use matter (`uses`), and what they import from
    any module of the run (`values`). A module is parsed only if its import lines import
    such a module, or it is one and imports from the run."""
    modules = list(modules)
    facts = TreeFacts()
    every = {name: m for m in modules for name in m.dotted}
    pmap_modules = {name: m for name, m in every.items() if _PMAP in m.source}
    if not pmap_modules:
        return facts
    summaries: dict[str, dict[str, str]] = {}
    for importer in modules:
        analysed = _PMAP in importer.source  # its global pass reads what it imports
        targets = every if analysed else pmap_modules
        if not _imports_any(importer, targets):
            continue
        try:
            tree = ast.parse(importer.source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        imported = ImportTable.from_tree(tree).imported if analysed else {}
        top_level = {id(s) for s in tree.body}
        module_names = None  # the importer's plain module names, read at its first attribute
        for target, name, node in _uses_in(tree, importer, targets):
            if target is importer:
                continue
            if _PMAP in target.source:
                facts.uses.setdefault(target.display, {}).setdefault(
                    name, importer.where(node.lineno))
                chain = _dotted(node.value) if isinstance(node, ast.Attribute) \
                    and name != EVERY_NAME else None
                if chain is not None and module_names is None:
                    module_names = _plain_module_names(tree, importer)
                if _plain_import(node, name, importer, top_level) or (
                        chain is not None and chain in module_names
                        and isinstance(node.ctx, ast.Load)):
                    facts.plain.setdefault(target.display, {}).setdefault(
                        name, set()).add(importer.display)
                    if chain is not None:
                        facts.aliases.setdefault(importer.display, {}).setdefault(
                            target.display, set()).add(chain)
                else:
                    facts.other.setdefault(target.display, set()).add(name)
            if not analysed:
                continue
            if target.display not in summaries:
                summaries[target.display] = _device_order_values(target)
            kind = summaries[target.display].get(name)
            written = dotted(node, imported) if not isinstance(node, ast.ImportFrom) else \
                next((imported.get(a.asname or a.name) for a in node.names if a.name == name), None)
            if kind is not None and written:
                facts.values.setdefault(importer.display, {})[written] = kind
    return facts

def _plain_import(node: ast.AST, name: str, importer: TreeModule, top_level: set[int]) -> bool:
    """`from <module> import name` (no alias) as a module-level statement of a .py module."""
    return isinstance(node, ast.ImportFrom) and id(node) in top_level \
        and not importer.cell_starts and importer.display.endswith(".py") \
        and all(a.asname in (None, name) for a in node.names if a.name == name)


def _plain_module_names(tree: ast.Module, importer: TreeModule) -> set[str]:
    """The dotted names through which a .py importer's `name.attr` reads always mean one
    module: bound only by module-level imports (`import pkg.steps as steps`, `from pkg
    import steps`: bound once; `import pkg.steps`: `pkg` bound by `import pkg...` alone)."""
    if importer.cell_starts or not importer.display.endswith(".py"):
        return set()
    by_import: dict[str, list[str]] = {}  # bound name -> the dotted module each binding gives
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    by_import.setdefault(alias.asname, []).append(alias.asname)
                else:
                    by_import.setdefault(alias.name.split(".")[0], []).append(alias.name)
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                name = alias.asname or alias.name
                by_import.setdefault(name, []).append(name)
    if not by_import:
        return set()
    top = {id(s) for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))}
    rebound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            rebound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            rebound.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            rebound.add(node.id)
        elif isinstance(node, ast.arg):
            rebound.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            rebound |= set(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            rebound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            rebound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            rebound.add(node.rest)
    found = set()
    for name, modules in by_import.items():
        if name in rebound:
            continue
        if modules == [name]:  # bound once, as itself (an alias or a from-import)
            found.add(name)
        elif all(m != name for m in modules) and len(modules) == len(set(modules)):
            found.update(modules)  # `import pkg.a`, `import pkg.b`: `pkg.a` and `pkg.b`
    return found


# What a module function taking no arguments may return, and the value kind the global
# analysis gives it (transforms/global_view/values.py): `def _pmap_device_order(): return
# jax.local_devices()` in an input pipeline, called from the trainer's module.
RETURNED_KINDS = {
    "jax.local_devices": "devices", "jax.devices": "devices",
    "jax.local_device_count": "devcount", "jax.device_count": "devcount",
}


def _device_order_values(module: TreeModule) -> dict[str, str]:
    """name -> kind of the module's functions that take no arguments and only return the
    devices or their count, as the functions `RETURNED_KINDS` names do."""
    try:
        tree = ast.parse(module.source)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    imported = ImportTable.from_tree(tree).imported
    found = {}
    for statement in tree.body:
        if not isinstance(statement, ast.FunctionDef) or statement.decorator_list:
            continue
        arguments = statement.args
        if arguments.posonlyargs or arguments.args or arguments.vararg or arguments.kwonlyargs \
                or arguments.kwarg:
            continue
        body = [s for s in statement.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return):
            continue
        value = body[0].value
        if isinstance(value, ast.Call) and not value.args and not value.keywords:
            kind = RETURNED_KINDS.get(dotted(value.func, imported) or "")
            if kind is not None:
                found[statement.name] = kind
    rebound = {t.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
               for t in ast.walk(s) if isinstance(t, ast.Name)}
    return {name: kind for name, kind in found.items() if name not in rebound}


_FROM_IMPORT = re.compile(
    rb"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n]*(?:\\\n[^\n]*)*)", re.M)
_IMPORT = re.compile(rb"^[ \t]*import[ \t]+([\w.][\w., \t]*)", re.M)


def _imports_any(module: TreeModule, targets) -> bool:
    """Whether an import statement of `module` imports a target module or a name from one:
    read off the import lines, so only such modules are parsed."""
    for match in _FROM_IMPORT.finditer(module.source):
        dots, base = match.group(1).decode(), match.group(2).decode()
        node = ast.ImportFrom(module=base or None, names=[], level=len(dots))
        resolved = _resolve(node, module)
        if resolved is None:
            continue
        if resolved in targets:
            return True
        names = re.split(r"[\s,()\\]+", match.group(3).decode())
        if any((f"{resolved}.{name}" if resolved else name) in targets
               for name in names if name and name != "as"):
            return True
    for match in _IMPORT.finditer(module.source):
        for part in match.group(1).decode().split(","):
            words = part.split()
            if words and words[0] in targets:
                return True
    return False


def used_elsewhere(uses: Mapping[str, str], name: str) -> str | None:
    """Where another module uses `name` (a module-level name of this module), or None."""
    if name in uses:
        return uses[name]
    if EVERY_NAME in uses and not name.startswith("_"):
        return uses[EVERY_NAME]
    return None


def _uses_in(tree: ast.Module, importer: TreeModule, targets: Mapping[str, TreeModule]):
    """(target module, name, node) for each use in `tree` of a target module's name: the node
    is the from-import, or the `module.name` attribute (the module itself where it is used
    as a value)."""
    aliases: dict[str, TreeModule] = {}  # a local name bound to a target module
    prefixes: dict[str, str] = {}  # `import pkg.train`: `pkg` reaches `pkg.train.<name>`
    attributes: list[ast.Attribute] = []
    loads: list[ast.Name] = []
    for node in ast.walk(tree):  # one walk: imports, and the names and attributes to read
        if isinstance(node, ast.Attribute):
            attributes.append(node)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.append(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in targets:
                    aliases[alias.asname] = targets[alias.name]
                elif not alias.asname:
                    if alias.name in targets and "." not in alias.name:
                        aliases[alias.name] = targets[alias.name]
                    else:
                        prefixes[alias.name.split(".", 1)[0]] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, importer)
            if base is None:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                if full in targets:  # `from pkg import train`: a module, used by attribute
                    aliases[alias.asname or alias.name] = targets[full]
                elif base in targets:
                    yield targets[base], alias.name, node
    if not aliases and not prefixes:
        return
    attribute_values = set()
    for node in attributes:
        attribute_values.add(id(node.value))
        chain = _dotted(node.value)
        if chain is None:
            continue
        if chain in aliases:
            yield aliases[chain], node.attr, node
        elif chain.split(".", 1)[0] in prefixes and chain in targets:
            yield targets[chain], node.attr, node
    for node in loads:
        if node.id in aliases and id(node) not in attribute_values:
            yield aliases[node.id], EVERY_NAME, node  # the module itself as a value


def _resolve(node: ast.ImportFrom, importer: TreeModule) -> str | None:
    """The absolute dotted module of `from <module> import ...`, relative levels resolved
    against the importer's package; None where it leaves the tree's names."""
    if not node.level:
        return node.module or ""
    own = importer.dotted[0].split(".") if importer.dotted else []
    package = own if importer.package else own[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])
