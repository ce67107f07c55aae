"""How `apply --interactive` cuts a changed file into hunks; `interactive` asks about them.

Kept apart from the asking and assembling because it is the part with the reasoning: which
lines belong together, and which changes are support (helper, imports) rather than sites.

The original and migrated texts (decoded with the file's encoding) are compared line by
line with difflib; blank lines never anchor a match, so the blank lines around the inserted
helper do not pull unchanged code apart. Each differing block is a hunk, except that

- a block of n lines replaced by n lines is split between logical lines (Python's tokenizer
  says where a statement ends), so two rewritten sites on adjacent lines are asked
  separately, while one multi-line call is always asked as a whole;
- lines that belong to the generated helper (``def _pmap_style_shard_map``) or to top-level
  import statements are cut off the front and back of a block into hunks of their own.

Hunks without code other than the helper and imports (blank and comment lines aside), and
with at least one helper or import line, are *support* hunks; so are hunks of blank lines
only. They are not asked (`Plan.asked`); a file whose changes are all support hunks is
asked hunk by hunk like any other. When the alignment would make a hunk that only deletes
or only adds code (the migration rewrites code in place), the file is asked as one hunk
instead, so no answer can drop or duplicate code.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import tokenize
from collections.abc import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from migrator.runner import FileResult
from transforms.helpers.runtime_helper import HELPER_NAME
from transforms.module_helpers import helper_base

# Line classes: what a line of the original or migrated text belongs to.
SUPPORT = "support"  # the generated helper, or a top-level import statement
NEUTRAL = "neutral"  # comment line between statements
BLANK = "blank"  # blank line between statements
CODE = "code"


@dataclasses.dataclass(eq=False)
class Hunk:
    i1: int  # original lines [i1, i2) (0-based) ...
    i2: int
    j1: int  # ... become migrated lines [j1, j2)
    j2: int
    support: bool = False
    accepted: bool = False


@dataclasses.dataclass
class Plan:
    """One changed file: its lines, its segments in order, and the hunks to ask about."""

    result: FileResult
    old: list[str]
    new: list[str]
    segments: list[tuple[int, int] | Hunk]  # (i1, i2) equal runs, or hunks
    old_class: list[str]
    new_class: list[str]

    @property
    def hunks(self) -> list[Hunk]:
        return [s for s in self.segments if isinstance(s, Hunk)]

    @property
    def asked(self) -> list[Hunk]:
        hunks = self.hunks
        asked = [h for h in hunks if not h.support]
        return asked or hunks  # only support changes: ask them like any other hunk

    @property
    def support(self) -> list[Hunk]:
        asked = self.asked
        return [h for h in self.hunks if h not in asked]


def _split_lines(text: str) -> list[str]:
    """Lines with their endings, split at \\n, \\r\\n and \\r only (as the tokenizer does)."""
    return io.StringIO(text, newline="").readlines()


def plan_hunks(result: FileResult) -> Plan:
    """Cut a changed Python file (not a notebook) into equal runs and hunks."""
    old_text = result.original.decode(result.encoding)
    new_text = result.migrated.decode(result.encoding)
    old, new = _split_lines(old_text), _split_lines(new_text)
    old_class, new_class = _classify(old_text, len(old)), _classify(new_text, len(new))
    old_ends, new_ends = _statement_ends(old_text), _statement_ends(new_text)
    segments: list[tuple[int, int] | Hunk] = []
    # Blank lines never anchor a match (they only extend one): otherwise the blank lines
    # around the inserted helper pair up with blank lines of the original, and an unchanged
    # function shows up as deleted in one hunk and re-added in another.
    matcher = difflib.SequenceMatcher(_is_blank, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            segments.append((i1, i2))
            continue
        pieces = [(i1, i2, j1, j2)]
        if tag == "replace" and i2 - i1 == j2 - j1 and old_ends is not None and new_ends is not None:
            pieces = _split_between_statements(i1, i2, j1, j2, old_ends, new_ends)
        for a1, a2, b1, b2 in pieces:
            if old[a1:a2] == new[b1:b2]:
                segments.append((a1, a2))
                continue
            for hunk in _peel_support(Hunk(a1, a2, b1, b2), old_class, new_class):
                hunk.support = _all_support(hunk, old_class, new_class)
                segments.append(hunk)
    if any(_moves_code(s, old_class, new_class) for s in segments if isinstance(s, Hunk)):
        # The alignment pairs lines that do not belong together; cutting it would let an
        # answer drop or duplicate code. Ask about the whole file at once instead.
        segments = [Hunk(0, len(old), 0, len(new))]
    return Plan(result, old, new, segments, old_class, new_class)


def _is_blank(line: str) -> bool:
    return not line.strip()


def _moves_code(hunk: Hunk, old_class: Sequence[str], new_class: Sequence[str]) -> bool:
    """A site hunk that only deletes or only inserts code: the migration rewrites code in
    place and never deletes or adds any besides the helper and imports."""
    if hunk.support:
        return False
    return (hunk.i1 == hunk.i2 or hunk.j1 == hunk.j2) and (
        CODE in old_class[hunk.i1:hunk.i2] or CODE in new_class[hunk.j1:hunk.j2]
    )


def _split_between_statements(i1, i2, j1, j2, old_ends: set[int], new_ends: set[int]):
    """n lines -> n lines, cut after each line that ends a logical line on both sides."""
    pieces, start = [], 0
    for k in range(i2 - i1):
        if (i1 + k + 1) in old_ends and (j1 + k + 1) in new_ends:
            pieces.append((i1 + start, i1 + k + 1, j1 + start, j1 + k + 1))
            start = k + 1
    if start < i2 - i1:
        pieces.append((i1 + start, i2, j1 + start, j2))
    return pieces


def _statement_ends(text: str) -> set[int] | None:
    """1-based numbers of the lines after which a new logical line starts (None: untokenizable)."""
    ends: set[int] = set()
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth = max(0, depth - 1)
            elif token.type == tokenize.NEWLINE or (token.type == tokenize.NL and depth == 0):
                ends.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        return None
    return ends


def _classify(text: str, count: int) -> list[str]:
    """SUPPORT, CODE, BLANK or NEUTRAL (a comment) for each line, from the top-level statements."""
    classes = [BLANK if _is_blank(line) else NEUTRAL for line in _split_lines(text)]
    try:
        wrapper = MetadataWrapper(cst.parse_module(text))
        positions = wrapper.resolve(PositionProvider)
    except Exception:  # noqa: BLE001 - unparsable: every line is code, nothing is peeled
        return [CODE] * count
    for statement in wrapper.module.body:
        start, end = positions[statement].start.line, positions[statement].end.line
        for decorator in getattr(statement, "decorators", ()):  # not part of the statement's range
            start = min(start, positions[decorator].start.line)
        kind = SUPPORT if _is_support(statement) else CODE
        for line in range(start, min(end, count) + 1):
            classes[line - 1] = kind
    return classes


def _is_support(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.FunctionDef):
        return helper_base(statement.name.value) == HELPER_NAME  # `_2` where the name is taken
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
    return False


def _all_support(hunk: Hunk, old_class: Sequence[str], new_class: Sequence[str]) -> bool:
    """No code line, and some helper/import line (or nothing but blank lines)."""
    classes = [*old_class[hunk.i1:hunk.i2], *new_class[hunk.j1:hunk.j2]]
    return CODE not in classes and (SUPPORT in classes or all(c == BLANK for c in classes))


def _support_run(classes: Iterable[str]) -> int:
    """Length of the leading run of non-code lines, cut back to its last support line."""
    run = 0
    for index, kind in enumerate(classes):
        if kind == CODE:
            break
        if kind == SUPPORT:
            run = index + 1
    return run


def _peel_support(hunk: Hunk, old_class, new_class) -> list[Hunk]:
    """Cut helper/import lines off the front and the back of a hunk that also changes code."""
    if _all_support(hunk, old_class, new_class):
        return [hunk]
    i1, i2, j1, j2 = hunk.i1, hunk.i2, hunk.j1, hunk.j2
    front = []
    a, b = _support_run(old_class[i1:i2]), _support_run(new_class[j1:j2])
    if a or b:
        front = [Hunk(i1, i1 + a, j1, j1 + b)]
        i1, j1 = i1 + a, j1 + b
    back = []
    a = _support_run(reversed(old_class[i1:i2]))
    b = _support_run(reversed(new_class[j1:j2]))
    if a or b:
        back = [Hunk(i2 - a, i2, j2 - b, j2)]
        i2, j2 = i2 - a, j2 - b
    middle = [Hunk(i1, i2, j1, j2)] if (i1, j1) != (i2, j2) else []
    return [*front, *middle, *back]
