"""Source in, source and findings out: the one entry point of the pure transform layer.

No file system, no JAX, no user code: `migrate_source` takes the bytes of a file and returns
the bytes it should have. Bytes in and out so that the encoding, BOM and line endings libcst
detected are written back exactly.
"""

from __future__ import annotations

import dataclasses
import re

import libcst as cst
from libcst.codemod import CodemodContext

from transforms.collective_groups import CollectiveGroups
from transforms.config_flags import ConfigFlags
from transforms.findings import Finding
from transforms.host_barriers import HostBarriers
from transforms.imports import apply_queued_imports
from transforms.module_helpers import insert_helpers, requested_helpers
from transforms.multiprocess import MultiProcess
from transforms.placement import DataPlacement
from transforms.pmap_sites import PmapToShardMap
from transforms.removed_apis import RemovedApis
from transforms.reporting import ReportingTransformer
from transforms.rule_runner import ModuleFacts, RuleRunner
from transforms.suppressions import Suppressions
from transforms.target import DEFAULT_TARGET, TargetJax
from transforms.unreplicate import Unreplicate

# The rules, in the order they run. Each is one concern (see its module docstring). Rules that
# add no lines run first; module-level helpers are inserted after all of them, so every finding
# carries the input file's line numbers.
# The hazard rules (MultiProcess, CollectiveGroups, HostBarriers) come before PmapToShardMap,
# which skips the sites they claim; ConfigFlags removes lines and must stay last.
RULES: tuple[type[ReportingTransformer], ...] = (
    MultiProcess, CollectiveGroups, HostBarriers,
    RemovedApis, DataPlacement, Unreplicate, PmapToShardMap,
    ConfigFlags,
)

# Files without any of the rules' words cannot hold a site; they are never parsed by libcst.
PREFILTER = re.compile(b"|".join(word for rule in RULES for word in rule.PREFILTER_WORDS))


@dataclasses.dataclass
class MigrationResult:
    source: bytes
    findings: list[Finding]

    @property
    def changed(self) -> bool:
        return self._original != self.source

    _original: bytes = b""
    layouts: tuple = ()  # --style global: transforms.global_view.layout.FunctionLayout


def might_need_migration(source: bytes) -> bool:
    return PREFILTER.search(source) is not None


def run_rules(
    module: cst.Module,
    context: CodemodContext,
    target: TargetJax,
    suppressions: Suppressions,
    source: bytes | None = None,
) -> tuple[cst.Module, list[Finding]]:
    """Every rule over `module` in one traversal with one shared context, then the helpers
    and imports any rule asked for, each added once. `source`: the bytes `module` was parsed
    from, when the caller has them. Findings are sorted and include unused suppressions."""
    rules = [rule_class(context, target, suppressions) for rule_class in RULES]
    facts = ModuleFacts(module, module.bytes if source is None else source)
    for rule in rules:
        rule.facts = facts
    module = module.visit(RuleRunner(rules, facts))
    findings = facts.placed([finding for rule in rules for finding in rule.findings])
    module = insert_helpers(module, requested_helpers(context))
    module = apply_queued_imports(module, context)
    findings.extend(suppressions.unused())
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return module, findings


def migrate_source(
    source: bytes, target: TargetJax = DEFAULT_TARGET, ignored: frozenset[str] = frozenset(),
    style: str = "faithful",
) -> MigrationResult:
    """Migrate one module. Raises libcst.ParserSyntaxError if `source` does not parse.

    `ignored`: finding codes the project configuration turns off here; a site whose finding
    is ignored is left alone (ignoring PM100 means "do not migrate").
    `style`: "faithful", or "global" (transforms/global_view first, the rules on what is left).
    """
    if not might_need_migration(source):
        return MigrationResult(source=source, findings=[], _original=source)
    if style == "global" and "PM100" not in ignored:
        from transforms.global_view.pipeline_hook import migrate_global_then_faithful

        return migrate_global_then_faithful(source, target, ignored, migrate_source)
    module = cst.parse_module(source)
    context = CodemodContext()
    module, findings = run_rules(
        module, context, target, Suppressions.from_source(source, ignored), source
    )
    return MigrationResult(source=module.bytes, findings=findings, _original=source)
