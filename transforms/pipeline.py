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
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

from transforms.findings import Finding
from transforms.pmap_sites import PmapToShardMap
from transforms.removed_apis import RemovedApis
from transforms.suppressions import Suppressions
from transforms.target import DEFAULT_TARGET, TargetJax

# Files without any of these words cannot hold a site; they are never parsed by libcst.
PREFILTER = re.compile(
    rb"pmap|device_put_replicated|device_put_sharded|(?<!tree_util\.)tree_map|PmapSharding|"
    rb"ShardedDeviceArray|device_buffers"
)  # jax.tree_util.tree_map is common and fine: it must not send a file down the slow path


@dataclasses.dataclass
class MigrationResult:
    source: bytes
    findings: list[Finding]

    @property
    def changed(self) -> bool:
        return self._original != self.source

    _original: bytes = b""


def might_need_migration(source: bytes) -> bool:
    return PREFILTER.search(source) is not None


def migrate_source(
    source: bytes, target: TargetJax = DEFAULT_TARGET, ignored: frozenset[str] = frozenset()
) -> MigrationResult:
    """Migrate one module. Raises libcst.ParserSyntaxError if `source` does not parse.

    `ignored`: finding codes the project configuration turns off here; a site whose finding
    is ignored is left alone (ignoring PM100 means "do not migrate").
    """
    if not might_need_migration(source):
        return MigrationResult(source=source, findings=[], _original=source)
    module = cst.parse_module(source)
    findings: list[Finding] = []
    # One context: imports asked for by any transform are added (or removed) once, at the end.
    # RemovedApis runs first because it never adds lines, so every finding keeps the line
    # numbers of the input file.
    context = CodemodContext()
    suppressions = Suppressions.from_source(source, ignored)
    for transform_class in (RemovedApis, PmapToShardMap):
        transform = transform_class(context, target, suppressions)
        module = transform.transform_module(module)
        findings.extend(transform.findings)
    module = AddImportsVisitor(context).transform_module(module)
    module = RemoveImportsVisitor(context).transform_module(module)
    findings.extend(suppressions.unused())
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return MigrationResult(source=module.bytes, findings=findings, _original=source)
