"""Multi-process modules: their pmap sites get the multi-process helper (research §6, R14).

The single-process helper builds a 1-D mesh over `jax.devices()[:n]`. With several processes,
pmap takes host-local inputs (leading axis `jax.local_device_count()`), runs over the devices
of every process grouped by process, and returns host-local outputs; that helper would map
process 0's devices on every host. So a module that shows multi-process use
(`jax.process_index()`, `jax.distributed.initialize`, `multihost_utils`, ...) gets the helper
of transforms/helpers/multiprocess_helper.py instead, with the same name and signature, which keeps
pmap's multi-process contract and costs a single-process run nothing (see its docstring).

Evidence-based, not decided for every module at run time: a module with no multi-process
evidence keeps exactly the code it got before, and its generated helper stays the short one.

`MultiProcess` runs before PmapToShardMap and records the first piece of evidence in the
codemod context. A nested pmap in such a module stays `jax.pmap` (PM505) when it depends on
a multi-process reference (in its own statement, its callers', or top-level code:
`process_read_reaching`): the 2-D helper has no host-local <-> global conversion. (`jax.device_count()` sizing a host-local batch in such
modules is reported by DataPlacement, PM405.) `multihost_utils.sync_global_devices` is not
evidence: it is what the host barrier rule writes, and it is correct single-process too.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from transforms.codes import Code
from transforms.helpers.helper_features import module_features
from transforms.helpers.runtime_helper import helper_source
from transforms.reading.names import ImportTable, dotted, parse_or_none
from transforms.reading.prefilter import all_nodes
from transforms.reporting import ReportingTransformer

SCRATCH_KEY = "pmap_migrate.multiprocess"  # (line, what) of the first multi-process call
TREE_KEY = "pmap_migrate.multiprocess_tree"  # (ast tree, import table) of such a module
PMAP = "jax.pmap"
EVIDENCE = {
    "jax.process_index", "jax.process_count", "jax.process_indices", "jax.host_id",
    "jax.host_count", "jax.distributed.initialize",
}
MULTIHOST_UTILS = "jax.experimental.multihost_utils."
NOT_EVIDENCE = {"jax.experimental.multihost_utils.sync_global_devices"}

HAND_MIGRATION = (
    "a hand migration needs one shard_map over a 2-D mesh of the devices grouped by process "
    "(`[d for p in range(jax.process_count()) for d in jax.local_devices(process_index=p)]`), "
    "host-local inputs made global with `multihost_utils.host_local_array_to_global_array` "
    "and outputs made host-local again with `multihost_utils.global_array_to_host_local_array`"
)


def evidence(rule: ReportingTransformer) -> tuple[int, str] | None:
    """(line, what) of the module's first multi-process reference, or None."""
    return rule.context.scratch.get(SCRATCH_KEY)


def pmap_helper_source(
    rule: ReportingTransformer, sites: set[str], *, compat: bool, existing: str = ""
) -> str:
    """The text of `_pmap_style_shard_map` this module gets: the features its sites use
    (`sites`; every feature with a `_pmap_compat` site), multi-process or not
    (transforms/helpers/helper_features.py). `existing`: the module's own helper, if it has
    one, which is not evidence of anything."""
    source = rule.facts.source if rule.facts is not None else rule._source_module.code.encode()
    source = source.replace(existing.encode(), b"") if existing else source
    features = module_features(
        sites, source, multiprocess=evidence(rule) is not None, compat=compat)
    return helper_source(rule.target, features)


def migration_note(rule: ReportingTransformer) -> str:
    """What a PM100 message adds in a multi-process module ('' elsewhere)."""
    found = evidence(rule)
    if found is None:
        return ""
    line, what = found
    return f"; multi-process (`{what}`, line {line}): host-local rows, as pmap"


def nested_note(rule: ReportingTransformer) -> str:
    """What a nested site's PM100 message adds in a multi-process module ('' elsewhere): it
    got the single-process 2-D helper because no multi-process reference reaches it."""
    found = evidence(rule)
    if found is None:
        return ""
    line, what = found
    return f"; single-process: the module's `{what}` (line {line}) does not reach it (PM505)"


def keeps_pmap(rule: ReportingTransformer, site: cst.CSTNode, *, nested: bool) -> bool:
    """For PmapToShardMap: True (and the site reported) when `site` must stay `jax.pmap`: a
    nested pmap in a multi-process module."""
    if evidence(rule) is None or not nested:
        return False
    tree, imported = rule.context.scratch[TREE_KEY]
    found = process_read_reaching(tree, imported, rule._position(site)[0])
    if found is None:  # judged at its own site: a read elsewhere does not reach it
        return False
    line, what = found
    rule._report(site, Code.MULTIPROCESS_PMAP_KEPT,
                 f"nested pmap in a multi-process module (`{what}` at line "
                 f"{line}): jax.pmap kept, because the 2-D helper is single-process (its mesh "
                 "would be process 0's devices on every host); "
                 f"{HAND_MIGRATION}; not migrated")
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
        evidence = first_evidence(tree, table.imported) if tree is not None else None
        if evidence is not None:
            self.context.scratch[SCRATCH_KEY] = evidence
            self.context.scratch[TREE_KEY] = tree, table.imported  # for keeps_pmap's judgement


def _process_zero_guards(tree: ast.Module) -> set[int]:
    """ids of the `jax.process_index` references of `if jax.process_index() == 0:` (or `!= 0`)
    statements that guard only host work: their branches call no function of the module (which
    may run a pmap, whose collectives would wait for the other processes) and name no pmap."""
    defined = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets
                if isinstance(t, ast.Name)}
    guards = set()
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.If):
            continue
        branches = [n for s in [*statement.body, *statement.orelse] for n in ast.walk(s)]
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined
               or "pmap" in _name_of(n) for n in branches):
            continue
        test = statement.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1
                and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
            continue
        for call, other in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
            if isinstance(call, ast.Call) and not call.args and not call.keywords \
                    and _name_of(call.func) == "process_index" \
                    and isinstance(other, ast.Constant) and other.value == 0:
                guards.add(id(call.func))
    return guards


def _single_process_guards(tree: ast.Module, imported: dict[str, str]) -> set[int]:
    """ids of the `jax.process_count` references of a refusal to run on several processes,
    `if jax.process_count() > 1: raise ...` (or `!= 1`), a statement of a function's own
    body that comes before every pmap of the module (flax's pixelcnn example has one): that
    function, the only place pmaps are made, never runs them with several processes."""
    guards = set()
    pmaps = [n for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))
             and dotted(n, imported) == PMAP]
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for statement in function.body:
            count = _refused_count(statement, imported)
            if count is None:
                continue
            inside = {id(n) for s in function.body if s.lineno > statement.end_lineno
                      for n in ast.walk(s)}
            if pmaps and all(id(p) in inside or _used_only_in(p, tree, inside) for p in pmaps):
                guards.add(id(count))
            break
    return guards


def _used_only_in(pmap: ast.AST, tree: ast.Module, inside: set[int]) -> bool:
    """Whether `pmap` is in a module-level statement that binds one name (a decorated def, an
    assignment), and every read of that name is in `inside`."""
    statement = next((s for s in tree.body if any(n is pmap for n in ast.walk(s))), None)
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = statement.name
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name):
        name = statement.targets[0].id
    else:
        return False
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, ast.Load)]
    return bool(reads) and all(id(n) in inside for n in reads)


def _refused_count(statement: ast.stmt, imported: dict[str, str]) -> ast.AST | None:
    """The `jax.process_count` of `if jax.process_count() > 1: raise ...` (or `!= 1`)."""
    if not (isinstance(statement, ast.If) and not statement.orelse
            and len(statement.body) == 1 and isinstance(statement.body[0], ast.Raise)):
        return None
    test = statement.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.left, ast.Call) and not test.left.args
            and not test.left.keywords and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 1 and isinstance(test.ops[0], (ast.Gt, ast.NotEq))):
        return None
    function = test.left.func
    return function if dotted(function, imported) == "jax.process_count" else None


def _name_of(node) -> str:
    """`x` of a name `x` or an attribute `a.x`; "" for anything else."""
    return node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""


_WORDS = re.compile(
    r"process_index|process_count|process_indices|host_id|host_count|distributed|multihost_utils"
)


def first_evidence(tree: ast.Module, imported: dict[str, str],
                   guards_count: bool = True) -> tuple[int, str] | None:
    """(line, dotted name) of the first multi-process reference, when the module also
    references jax.pmap. Read from the standard `ast` (a fraction of a libcst visit), with
    names resolved through the module's import table (local name -> dotted name).
    `guards_count=False`: a process-0 guard (`if jax.process_index() == 0:`, or such a test
    bound to a name) is common in single-process scripts and is not evidence on its own; nor
    is a refusal to run on several processes (`_single_process_guards`)."""
    guards = set() if guards_count else \
        _process_zero_guards(tree) | _single_process_guards(tree, imported)
    found, has_pmap = [], False
    for node in all_nodes(tree):
        if id(node) in guards:
            continue
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


def process_read_reaching(tree: ast.Module, imported: dict[str, str], line: int
                          ) -> tuple[int, str] | None:
    """(line, dotted name) of the first multi-process reference that the pmap site on `line`
    depends on, or None when none does: the site is judged where it stands, not by a read
    elsewhere in the module (issue 41 item 5).

    Read per module-level statement, on the safe side: the statement holding the site, every
    def or class that uses its name (or uses one that does, transitively: its callers), and
    the module's other top-level code (which runs whenever the module does), each counted with
    the module functions and classes it uses in turn. A reference in a function that none of
    those reaches (another entry point, a data loader the site's callers never call) does not
    make this site multi-process."""
    body = tree.body
    start = lambda s: min([s.lineno] + [d.lineno for d in getattr(s, "decorator_list", ())])
    holder = next((s for s in body if start(s) <= line <= s.end_lineno), None)
    if holder is None:
        return None
    bound = {id(s): _bound_names(s) for s in body}
    loads = {id(s): {n.id for n in ast.walk(s) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Load)} for s in body}
    own = {id(s): _evidence_in(s, imported) for s in body}
    # Which statements read the process index themselves or through what they use.
    by_name = {name: s for s in body for name in bound[id(s)]}
    reads = {id(s): own[id(s)][0] if own[id(s)] else None for s in body}
    changed = True
    while changed:
        changed = False
        for s in body:
            if reads[id(s)] is None:
                found = next((reads[id(by_name[n])] for n in sorted(loads[id(s)])
                              if n in by_name and reads[id(by_name[n])] is not None), None)
                if found is not None:
                    reads[id(s)], changed = found, True
    # The statements the site depends on: its own, its callers (transitively), top-level code.
    names, reaching = set(bound[id(holder)]), {id(holder)}
    changed = True
    while changed:
        changed = False
        for s in body:
            if id(s) not in reaching and loads[id(s)] & names \
                    and isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                reaching.add(id(s))
                names |= bound[id(s)]
                changed = True
    reaching |= {id(s) for s in body
                 if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    found = [reads[id(s)] for s in body if id(s) in reaching and reads[id(s)] is not None]
    return min(found) if found else None


def _bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names a statement binds (a def's, a class's, assignment targets')."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _evidence_in(statement: ast.stmt, imported: dict[str, str]) -> list[tuple[int, str]]:
    """(line, what) of the multi-process references in `statement`, first first."""
    found = []
    for node in ast.walk(statement):
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            qualified = dotted(node, imported)
            if qualified in EVIDENCE or (qualified.startswith(MULTIHOST_UTILS)
                                         and qualified not in NOT_EVIDENCE):
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [(line, what) for line, _, what in sorted(found)]
