"""`--style global` in the per-file pipeline: the global pass, then the faithful rules on what
it left, with the rules' findings moved back to the input's line numbers."""

from __future__ import annotations

import dataclasses
import re

from transforms.codes import Code
from transforms.line_matcher import LineMatcher
from transforms.global_view.rewrite import migrate_global
from transforms.tree_uses import NO_TREE


def migrate_global_then_faithful(source: bytes, target, ignored, migrate_source,
                                 helper_module: str | None = None, top_level: bool = True,
                                 tree=NO_TREE):
    """`migrate_source` is the faithful pipeline (passed in to keep the import one-way);
    `helper_module`: where the contract functions and the faithful helpers are imported from;
    `top_level`, `tree`: see `migrate_global`."""
    first = migrate_global(source, target, helper_module, top_level, tree)
    rest = migrate_source(first.source, target, ignored)
    lines = _line_map(first.source, source)
    moved = [dataclasses.replace(f, line=lines.get(f.line, f.line),
                                 col=f.col - _indent_added(first.source, source, f.line, lines),
                                 message=_lines_named(f.message, lines))
             for f in rest.findings]
    # Per-process idioms in global callers are reported by the global pass, in its terms.
    said = {(f.line, f.col) for f in first.findings if f.code == Code.PROCESS_IDIOM_KEPT}
    moved = [f for f in moved if not (f.code == Code.PROCESS_IDIOM_KEPT and (f.line, f.col) in said)]
    findings = sorted([*first.findings, *moved], key=lambda f: (f.line, f.col, f.code))
    return dataclasses.replace(rest, findings=findings, _original=source, layouts=first.layouts)


def _lines_named(message: str, lines: dict[int, int]) -> str:
    """`message` with the lines it names ("line 47", "lines 3") moved back to the input's: the
    faithful rules read the global pass's output, whose lines are not the user's."""
    return _LINE_NAMED.sub(lambda m: f"{m.group(1)}{lines.get(int(m.group(2)), int(m.group(2)))}",
                           message)


_LINE_NAMED = re.compile(r"(\bline )(\d+)\b")


def _line_map(new: bytes, old: bytes) -> dict[int, int]:
    """1-based line of `new` -> the line of `old` it came from (unchanged lines exactly; a
    changed line maps to the start of the block it replaced). Lines are compared without
    their indentation, so a line only moved left or right still maps to itself."""
    a = [line.strip() for line in old.splitlines()]
    b = [line.strip() for line in new.splitlines()]
    mapping = {}
    for tag, i1, i2, j1, j2 in LineMatcher(a, b).get_opcodes():  # difflib's, faster
        for offset, j in enumerate(range(j1, j2)):
            mapping[j + 1] = (i1 + min(offset, max(i2 - i1 - 1, 0))) + 1
    return mapping


def _indent_added(new: bytes, old: bytes, line: int, lines: dict[int, int]) -> int:
    """How much deeper `line` of `new` is indented than the unchanged line it came from."""
    new_lines, old_lines = new.splitlines(), old.splitlines()
    if not (0 < line <= len(new_lines) and 0 < lines.get(line, 0) <= len(old_lines)):
        return 0
    a, b = new_lines[line - 1], old_lines[lines[line] - 1]
    if a.strip() != b.strip():
        return 0
    return max(0, (len(a) - len(a.lstrip())) - (len(b) - len(b.lstrip())))
