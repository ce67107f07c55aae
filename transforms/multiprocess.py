"""Multi-process modules keep `jax.pmap` (research §6, R14).

The migrated helper builds a 1-D mesh over `jax.devices()[:n]`: a single-process translation.
With several processes, pmap takes host-local inputs (leading axis `jax.local_device_count()`),
runs over the devices of every process grouped by process, and returns host-local outputs; the
helper would instead map process 0's devices on every host. The new pmap on JAX 0.10 still does
the host-local <-> global conversion itself, so in a module that shows multi-process use
(`jax.process_index()`, `jax.distributed.initialize`, `multihost_utils`, ...) the pmap sites
are left as `jax.pmap` and each one is reported (PM505, by PmapToShardMap through
`keeps_pmap`) with what a hand migration must change.

`MultiProcess` runs before PmapToShardMap and records the first piece of evidence in the
codemod context. (`jax.device_count()` sizing a host-local batch in such modules is reported by
DataPlacement, PM405.) `multihost_utils.sync_global_devices` is not evidence: it is what the host
barrier rule writes, and it is correct single-process too.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from transforms.names import ImportTable, parse_or_none
from transforms.reporting import ReportingTransformer

SCRATCH_KEY = "pmap_migrate.multiprocess"  # (line, what) of the first multi-process call
PMAP = "jax.pmap"
EVIDENCE = {
    "jax.process_index", "jax.process_count", "jax.process_indices", "jax.host_id",
    "jax.host_count", "jax.distributed.initialize",
}
MULTIHOST_UTILS = "jax.experimental.multihost_utils."
NOT_EVIDENCE = {"jax.experimental.multihost_utils.sync_global_devices"}

HAND_MIGRATION = (
    "a hand migration needs a global mesh over the devices grouped by process, "
    "`Mesh(np.array([d for p in range(jax.process_count()) for d in "
    "jax.local_devices(process_index=p)]), (axis,))`, host-local inputs made global with "
    "`multihost_utils.host_local_array_to_global_array` (or "
    "`jax.make_array_from_process_local_data`) and outputs made host-local again with "
    "`multihost_utils.global_array_to_host_local_array`; `.lower(...).compile()(...)` skips "
    "that conversion, so AOT-compiled calls need it by hand too"
)


def keeps_pmap(rule: ReportingTransformer, site: cst.CSTNode) -> bool:
    """For PmapToShardMap: True (and the site reported) when the module is multi-process, so
    the site must stay `jax.pmap`."""
    evidence = rule.context.scratch.get(SCRATCH_KEY)
    if evidence is None:
        return False
    line, what = evidence
    rule._report(site, "PM505", f"multi-process module (`{what}` at line {line}): jax.pmap "
                 "kept, because the single-process translation would map process 0's devices "
                 f"on every host; JAX 0.10's pmap still runs it with host-local semantics. "
                 f"{HAND_MIGRATION[0].upper()}{HAND_MIGRATION[1:]}; not migrated")
    return True


class MultiProcess(ReportingTransformer):
    PREFILTER_WORDS = (rb"pmap",)  # nothing to keep without a pmap site

    def visit_Module(self, node: cst.Module) -> None:
        """Decide before any site is visited: rules may share one traversal, so a site near
        the top must already know about a `jax.process_index()` near the bottom."""
        if self.facts is not None:  # the source and its ast, shared by every rule
            if not _WORDS.search(self.facts.source.decode("latin-1")):
                return
            tree, table = self.facts.syntax_tree, self.facts.imports
        else:
            code = node.code
            if not _WORDS.search(code):
                return
            tree = parse_or_none(code.encode("utf-8"))
            table = ImportTable.from_tree(tree)
        evidence = _first_evidence(tree, table.imported) if tree is not None else None
        if evidence is not None:
            self.context.scratch[SCRATCH_KEY] = evidence


_WORDS = re.compile(
    r"process_index|process_count|process_indices|host_id|host_count|distributed|multihost_utils"
)


def _first_evidence(tree: ast.Module, imported: dict[str, str]) -> tuple[int, str] | None:
    """(line, dotted name) of the first multi-process reference, when the module also
    references jax.pmap. Read from the standard `ast` (a fraction of a libcst visit), with
    names resolved through the module's import table (local name -> dotted name)."""
    found, has_pmap = [], False
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Attribute, ast.Name)) or not isinstance(node.ctx, ast.Load):
            continue
        parts, current = [], node
        while isinstance(current, ast.Attribute):
            parts.append(current.attr)
            current = current.value
        if not isinstance(current, ast.Name) or current.id not in imported:
            continue
        qualified = ".".join([imported[current.id], *reversed(parts)])
        has_pmap = has_pmap or qualified == PMAP
        if qualified in EVIDENCE or (
            qualified.startswith(MULTIHOST_UTILS) and qualified not in NOT_EVIDENCE
        ):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
    if not found or not has_pmap:
        return None
    line, _, what = min(found)
    return line, what
