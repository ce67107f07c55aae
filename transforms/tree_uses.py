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

from transforms.reading.prefilter import might_need_migration

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


def uses_across_modules(modules: Iterable[TreeModule]) -> dict[str, dict[str, str]]:
    """display of a module that may hold pmap code -> {name other modules use: where the first
    use is, `path:line`}. Only modules `might_need_migration` are targets; a module is read
    only if its text names one of them."""
    modules = list(modules)
    targets = {name: m for m in modules if might_need_migration(m.source) for name in m.dotted}
    if not targets:
        return {}
    last_parts = {name.rsplit(".", 1)[-1] for name in targets}
    mentions = re.compile(rb"\b(?:%s)\b" % b"|".join(re.escape(p.encode()) for p in last_parts))
    uses: dict[str, dict[str, str]] = {}
    for importer in modules:
        if not mentions.search(importer.source) and b"from ." not in importer.source:
            continue
        try:
            tree = ast.parse(importer.source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        for target, name, line in _uses_in(tree, importer, targets):
            if target is not importer:
                uses.setdefault(target.display, {}).setdefault(name, importer.where(line))
    return uses


def used_elsewhere(uses: Mapping[str, str], name: str) -> str | None:
    """Where another module uses `name` (a module-level name of this module), or None."""
    if name in uses:
        return uses[name]
    if EVERY_NAME in uses and not name.startswith("_"):
        return uses[EVERY_NAME]
    return None


def _uses_in(tree: ast.Module, importer: TreeModule, targets: Mapping[str, TreeModule]):
    """(target module, name, line) for each use in `tree` of a target module's name."""
    aliases: dict[str, TreeModule] = {}  # a local name bound to a target module
    prefixes: dict[str, str] = {}  # `import pkg.train`: `pkg` reaches `pkg.train.<name>`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
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
                    yield targets[base], alias.name, node.lineno
    if not aliases and not prefixes:
        return
    attribute_values = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _dotted(node.value)
            if chain is None:
                continue
            head = chain.split(".", 1)[0]
            if chain in aliases:
                yield aliases[chain], node.attr, node.lineno
            elif head in prefixes and chain in targets:
                yield targets[chain], node.attr, node.lineno
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and node.id in aliases and id(node) not in attribute_values:
            yield aliases[node.id], EVERY_NAME, node.lineno  # the module itself as a value


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
