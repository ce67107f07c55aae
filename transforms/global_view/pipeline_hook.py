"""`--style global` in the per-file pipeline: the global pass, then the faithful rules on what
it left, with the rules' findings moved back to the input's line numbers."""

from __future__ import annotations

import dataclasses
import difflib

from transforms.global_view.rewrite import migrate_global


def migrate_global_then_faithful(source: bytes, target, ignored, migrate_source):
    """`migrate_source` is the faithful pipeline (passed in to keep the import one-way)."""
    first = migrate_global(source, target)
    rest = migrate_source(first.source, target, ignored)
    lines = _line_map(first.source, source)
    moved = [dataclasses.replace(f, line=lines.get(f.line, f.line)) for f in rest.findings]
    findings = sorted([*first.findings, *moved], key=lambda f: (f.line, f.col, f.code))
    return dataclasses.replace(rest, findings=findings, _original=source, layouts=first.layouts)


def _line_map(new: bytes, old: bytes) -> dict[int, int]:
    """1-based line of `new` -> the line of `old` it came from (unchanged lines exactly; a
    changed line maps to the start of the block it replaced)."""
    a, b = old.splitlines(), new.splitlines()
    mapping = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for offset, j in enumerate(range(j1, j2)):
            mapping[j + 1] = (i1 + min(offset, max(i2 - i1 - 1, 0))) + 1
    return mapping
