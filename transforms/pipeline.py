"""Source in, source and findings out: the one entry point of the pure transform layer.

No file system, no JAX, no user code: `migrate_source` takes the bytes of a file and returns
the bytes it should have. Bytes in and out so that the encoding, BOM and line endings libcst
detected are written back exactly.
"""

from __future__ import annotations

import ast
import dataclasses
import functools

import libcst as cst

from transforms.codes import Code
from transforms.faithful.collective_groups import CollectiveGroups
from transforms.faithful.config_flags import ConfigFlags
from transforms.codes.findings import Finding
from transforms.faithful.host_barriers import HostBarriers
from transforms.imports import (
    RuleContext,
    apply_queued_imports,
    remove_import,
    remove_unused_plain_imports,
)
from transforms.line_wrap import wrap_long_lines
from transforms.module_helpers import HELPER_MODULE_KEY, provide_helpers
from transforms.faithful.multiprocess import MultiProcess
from transforms.faithful.patched_pmap import PatchedPmap
from transforms.faithful.placement import DataPlacement
from transforms.reading.names import ImportTable
from transforms.reading.pmap_patches import pmap_patch
from transforms.reading.prefilter import might_need_migration, parse_or_none, referenced_rules
from transforms.faithful.pmap_sites import PmapToShardMap
from transforms.faithful.process_idioms import ProcessIdioms
from transforms.faithful.removed_apis import RemovedApis
from transforms.reporting import ReportingTransformer
from transforms.rule_runner import ModuleFacts, RuleRunner
from transforms.suppressions import Suppressions
from transforms.target import DEFAULT_TARGET, TargetJax
from transforms.todo_comments import TODO_WORD, add_todos, todo_findings, wants_todo
from transforms.traversal import transform_module
from transforms.tree_uses import NO_TREE, TreeContext
from transforms.faithful.unreplicate import Unreplicate

# The rules, in the order they run. Each is one concern (see its module docstring). Rules that
# add no lines run first; module-level helpers are inserted after all of them, so every finding
# carries the input file's line numbers.
# The hazard rules (PatchedPmap, MultiProcess, CollectiveGroups, HostBarriers) come before
# PmapToShardMap, which skips the sites they claim; ConfigFlags removes lines and must stay last.
RULES: tuple[type[ReportingTransformer], ...] = (
    PatchedPmap, MultiProcess, ProcessIdioms, CollectiveGroups, HostBarriers,
    RemovedApis, DataPlacement, Unreplicate, PmapToShardMap,
    ConfigFlags,
)

# Files without any of the rules' words (`might_need_migration`) cannot hold a site, and files
# with words but without a reference to an API the rules act on (`referenced_rules`) cannot get
# a change or a finding: neither is parsed by libcst (transforms/reading/prefilter.py). Of the
# others, each goes through the rules whose references it holds.
_UNPARSED = object()


@dataclasses.dataclass
class MigrationResult:
    source: bytes
    findings: list[Finding]

    @property
    def changed(self) -> bool:
        return self._original != self.source

    _original: bytes = b""
    layouts: tuple = ()  # --style global: transforms.global_view.layout.FunctionLayout


def warm_up() -> None:
    """Fill the caches the first file of a process would fill: the rules' hook tables and
    libcst's visit order of every node type. Called before worker processes are forked, so
    they share the result instead of each computing it."""
    from transforms.rule_runner import rule_hooks
    from transforms.traversal import visit_plan

    for rule_class in RULES:
        rule_hooks(rule_class)
        rule_class(RuleContext(), DEFAULT_TARGET, Suppressions([]))
    for node_type in vars(cst).values():
        if isinstance(node_type, type) and issubclass(node_type, cst.CSTNode):
            if not node_type.__abstractmethods__:
                visit_plan(node_type)


def run_rules(
    module: cst.Module,
    context: RuleContext,
    target: TargetJax,
    suppressions: Suppressions,
    source: bytes | None = None,
    syntax_tree: ast.Module | None | object = _UNPARSED,
    helper_module: str | None = None,
    *,
    helpers_as_text: bool = False,
    rule_names: frozenset[str] | None = None,
    plain_imports: bool = True,
) -> tuple[cst.Module, list[Finding]]:
    """Every rule over `module` in one traversal with one shared context, then the helpers
    and imports any rule asked for, each added once. `source`: the bytes `module` was parsed
    from, and `syntax_tree` their `ast`, when the caller has them. `helper_module`: import the
    helpers from this module instead of defining them. `helpers_as_text`: for a caller that
    only wants the module's code (module_helpers.HelperText). `rule_names`: only these of
    RULES (prefilter.referenced_rules: the others can do nothing here), in RULES' order.
    `plain_imports=False`: an `import jax` the rules left unused is for the caller to remove
    (imports.remove_unused_plain_imports, on the text it prints anyway).
    Findings are sorted and include unused suppressions."""
    context.scratch[HELPER_MODULE_KEY] = helper_module
    rules = [rule_class(context, target, suppressions) for rule_class in RULES
             if rule_names is None or rule_class.__name__ in rule_names]
    source = module.bytes if source is None else source
    facts = (ModuleFacts(module, source) if syntax_tree is _UNPARSED
             else ModuleFacts(module, source, syntax_tree))
    for rule in rules:
        rule.facts = facts
    used = _used_plain_imports(facts.syntax_tree)
    module = transform_module(module, RuleRunner(rules, facts))
    findings = facts.placed([finding for rule in rules for finding in rule.findings])
    for module_name, alias in used:  # unused only because the rules rewrote their uses
        remove_import(context, module_name, None, alias)
    module = provide_helpers(module, context, helper_module, as_text=helpers_as_text)
    module = apply_queued_imports(module, context, plain_imports=plain_imports)
    findings.extend(suppressions.unused())
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return module, findings


def _used_plain_imports(tree: ast.Module | None) -> list[tuple[str, str | None]]:
    """(module, alias) of the module's top-level `import jax [as j]` that it uses only for
    what the rules rewrite: they may leave it unused (a module whose only uses were `jax.pmap`
    and `jax.device_put_sharded` calls the helpers, which import jax themselves)."""
    if tree is None:
        return []
    imports = [(a.name, a.asname) for node in tree.body if isinstance(node, ast.Import)
               for a in node.names if a.name == "jax"]
    return [(name, alias) for name, alias in imports if _only_rewritten_uses(tree, alias or name)]


# What the rules may rewrite away: `jax.<one of these>` (a pmap, a removed placement API, the
# jax_pmap_shmap_merge flag).
_REWRITTEN_ATTRIBUTES = frozenset({"pmap", "device_put_sharded", "device_put_replicated", "config"})


def _only_rewritten_uses(tree: ast.Module, name: str) -> bool:
    """Whether `name` is loaded, and every load is `name.<an API the rules rewrite>`: only then
    can the migration leave the import unused (the check after the rewrite, import_uses.py,
    prints and parses the whole module; most modules use jax for more and stop here)."""
    rewritten = set()
    for node in ast.walk(tree):  # breadth first: an attribute comes before its name
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == name and node.attr in _REWRITTEN_ATTRIBUTES:
            rewritten.add(id(node.value))
        elif isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) \
                and id(node) not in rewritten:
            return False
    return bool(rewritten)


def _patches_pmap(source: bytes, syntax_tree) -> bool:
    """Whether the module patches jax.pmap (a test faking it): its sites stay jax.pmap in
    either style (transforms/faithful/patched_pmap.py), so the global pass must not take them."""
    if not any(word in source for word in (b"fake_pmap", b"patch", b"setattr", b"pmap =")):
        return False
    tree = parse_or_none(source) if syntax_tree is _UNPARSED else syntax_tree
    return tree is not None and pmap_patch(tree, ImportTable.from_tree(tree).imported) is not None


def migrate_source(
    source: bytes,
    target: TargetJax = DEFAULT_TARGET,
    ignored: frozenset[str] = frozenset(),
    *,
    syntax_tree: ast.Module | None | object = _UNPARSED,
    precise_prefilter: bool = True,
    helper_module: str | None = None,
    style: str = "faithful",
    rule_names: frozenset[str] | None = None,
    tree: TreeContext = NO_TREE,
) -> MigrationResult:
    """Migrate one module (see `_migrate`). Where the migration changes the module, every
    warning leaves a `# TODO(pmap-migrate): CODE` comment above its statement, since the
    changed code may no longer show it (transforms/todo_comments.py); the TODO comments an
    earlier run left are reported. Raises libcst.ParserSyntaxError if `source` does not
    parse."""
    migrate = functools.partial(
        _migrate, target=target, ignored=ignored, precise_prefilter=precise_prefilter,
        helper_module=helper_module, style=style, tree=tree)
    result = migrate(source, syntax_tree=syntax_tree, rule_names=rule_names)
    tree = syntax_tree if syntax_tree is not _UNPARSED else None
    left: list[Finding] = []  # the TODO comments of an earlier run
    if TODO_WORD in source:
        tree = tree or parse_or_none(source)
        left = [f for f in todo_findings(source, tree, result.findings) if f.code not in ignored]
    if result.changed and any(wants_todo(f) for f in result.findings):
        commented, inserted = add_todos(source, result.findings, tree or parse_or_none(source))
        if inserted:
            # Comments change no rule's analysis: the findings (whose messages may name lines)
            # stay those of the source as it is; only the text gains the comments.
            again = migrate(commented, syntax_tree=_UNPARSED, rule_names=rule_names)
            result = dataclasses.replace(result, source=again.source)
    if left:
        findings = sorted(result.findings + left, key=lambda f: (f.line, f.col, f.code))
        result = dataclasses.replace(result, findings=findings)
    return result


def _migrate(
    source: bytes,
    target: TargetJax = DEFAULT_TARGET,
    ignored: frozenset[str] = frozenset(),
    *,
    syntax_tree: ast.Module | None | object = _UNPARSED,
    precise_prefilter: bool = True,
    helper_module: str | None = None,
    style: str = "faithful",
    rule_names: frozenset[str] | None = None,
    tree: TreeContext = NO_TREE,
) -> MigrationResult:
    """Migrate one module. Raises libcst.ParserSyntaxError if `source` does not parse.

    `ignored`: finding codes the project configuration turns off here; a site whose finding
    is ignored is left alone (ignoring PM100 means "do not migrate"). `syntax_tree`:
    `ast.parse(source)` (None if it fails) when the caller has it. `precise_prefilter=False`
    sends every file with a rule's word to libcst, through every rule (for tests that compare
    the two). `rule_names`: `referenced_rules(source, syntax_tree)` when the caller has it.
    `helper_module`: a dotted module name the helpers are imported from instead of being
    defined here.
    `style`: "faithful", or "global" (transforms/global_view first, the rules on what is left).
    `tree`: what the other modules of the run tell about this one (transforms/tree_uses.py):
    in the global style the names they use keep their calling contract.
    """
    unchanged = MigrationResult(source=source, findings=[], _original=source)
    grouped = style == "global" and tree.group is not None  # see cross_module.py
    if not grouped and not might_need_migration(source):
        return unchanged
    if precise_prefilter and rule_names is None:
        if syntax_tree is _UNPARSED:
            syntax_tree = parse_or_none(source)
        rule_names = referenced_rules(source, syntax_tree)
    if rule_names is not None and not rule_names and not grouped:
        return unchanged
    if style == "global" and Code.PMAP_MIGRATED not in ignored and not _patches_pmap(source, syntax_tree):
        from transforms.global_view.pipeline_hook import migrate_global_then_faithful

        faithful = functools.partial(_migrate, helper_module=helper_module)
        result = migrate_global_then_faithful(source, target, ignored, faithful, helper_module,
                                              tree=tree)
        return dataclasses.replace(result, source=wrap_long_lines(result.source, source))
    module = cst.parse_module(source)
    context = RuleContext()
    module, findings = run_rules(
        module, context, target, Suppressions.from_source(source, ignored), source, syntax_tree,
        helper_module, helpers_as_text=True, rule_names=rule_names, plain_imports=False,
    )
    module, data = remove_unused_plain_imports(module, module.bytes, context)
    return MigrationResult(source=wrap_long_lines(data, source), findings=findings,
                           _original=source)
