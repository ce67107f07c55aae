"""`apply --interactive`: approve the migration hunk by hunk, as `git add -p` does.

`select_changes` takes the full results of a run (contents included, not `slim()` ones) and
returns them with `.migrated` replaced by the version the user accepted (the original bytes
when nothing of a file was accepted). Writing stays with the caller (`runner.write_result`).

How a file is cut into hunks
----------------------------
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
only. They are not asked: they are applied iff at least one other hunk of the file is accepted, since the
accepted sites call the helper and use the imports. An import line the migration removed
(``from jax import pmap``) is removed only when every hunk of the file is accepted, because a
rejected site may still use it; otherwise it is kept next to the new imports. A file whose
changes are all support hunks is asked hunk by hunk like any other. When the alignment
would make a hunk that only deletes or only adds code (the migration rewrites code in place),
the file is asked as one hunk instead, so no answer can drop or duplicate code.

A notebook is asked as one hunk (its JSON is not Python; the runner already checked it).

After assembling, the new text is parsed with libcst; when it does not parse the file is left
unchanged and `show` says so.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import sys
import tokenize
from typing import Callable, Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from migrator import diffing
from migrator.runner import FileResult
from transforms.helpers.runtime_helper import HELPER_NAME

PROMPT = "Apply this hunk? [y]es/[n]o/[a]ll remaining/[d]one with this file/[q]uit "
HELP = (
    "y - apply this hunk\n"
    "n - do not apply this hunk\n"
    "a - apply this hunk and every remaining hunk, in this file and all later files\n"
    "d - do not apply this hunk nor any later hunk of this file\n"
    "q - quit: do not apply this hunk nor anything not accepted yet"
)
ANSWERS = {
    "y": "y", "yes": "y",
    "n": "n", "no": "n",
    "a": "a", "all": "a",
    "d": "d", "done": "d",
    "q": "q", "quit": "q",
}
CONTEXT = 3

# Line classes: what a line of the original or migrated text belongs to.
SUPPORT = "support"  # the generated helper, or a top-level import statement
NEUTRAL = "neutral"  # comment line between statements
BLANK = "blank"  # blank line between statements
CODE = "code"


def refuse_without_tty() -> str | None:
    """A message for the user when stdin or stdout is not a terminal, else None.

    The CLI prints it and exits 2: answers cannot be read from a pipe, and a diff shown into
    a pipe would be approved unseen.
    """
    not_tty = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)) if not _isatty(stream)]
    if not not_tty:
        return None
    which = " and ".join(not_tty)
    verb = "are" if len(not_tty) > 1 else "is"
    return (
        f"pmap-migrate: apply --interactive needs a terminal, but {which} {verb} not a TTY. "
        "Run it from a terminal, or review the changes with `pmap-migrate diff` and run "
        "`pmap-migrate apply` without --interactive."
    )


def _isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


@dataclasses.dataclass(eq=False)
class _Hunk:
    i1: int  # original lines [i1, i2) (0-based) ...
    i2: int
    j1: int  # ... become migrated lines [j1, j2)
    j2: int
    support: bool = False
    accepted: bool = False


@dataclasses.dataclass
class _Plan:
    """One changed file: its lines, its segments in order, and the hunks to ask about."""

    result: FileResult
    old: list[str]
    new: list[str]
    segments: list[tuple[int, int] | _Hunk]  # (i1, i2) equal runs, or hunks
    old_class: list[str]
    new_class: list[str]

    @property
    def hunks(self) -> list[_Hunk]:
        return [s for s in self.segments if isinstance(s, _Hunk)]

    @property
    def asked(self) -> list[_Hunk]:
        hunks = self.hunks
        asked = [h for h in hunks if not h.support]
        return asked or hunks  # only support changes: ask them like any other hunk

    @property
    def support(self) -> list[_Hunk]:
        asked = self.asked
        return [h for h in self.hunks if h not in asked]


class _Quit(Exception):
    pass


def select_changes(
    results: list[FileResult], ask: Callable[[str], str], show: Callable[[str], None]
) -> list[FileResult]:
    """Ask about every hunk of every changed result; return the results with what was accepted.

    `ask(prompt)` returns the answer (like `input`; EOFError counts as quit); `show(text)` prints
    a block of text without a trailing newline (like `print`). Results come back in the same
    order; unchanged ones as they were.
    """
    accept_all = False
    quitting = False
    out: list[FileResult] = []
    for result in results:
        if not result.changed or quitting:
            out.append(result if not result.changed else _with(result, result.original))
            continue
        if result.migrated == result.original:
            raise ValueError(
                f"{result.file.display}: select_changes needs full results, not slim() ones"
            )
        if _is_notebook(result):
            plan = None
            hunks = [_Hunk(0, 0, 0, 0)]
        else:
            plan = _plan(result)
            hunks = plan.asked
        if accept_all:
            for hunk in hunks:
                hunk.accepted = True
            show(f"{result.file.display}: applying all {len(hunks)} hunk(s)")
        else:
            try:
                accept_all = _ask_file(result, plan, hunks, ask, show)
            except _Quit:
                quitting = True
        out.append(_assemble(result, plan, hunks, show))
    return out


def _ask_file(
    result: FileResult, plan: _Plan | None, hunks: list[_Hunk], ask, show
) -> bool:
    """Ask about each hunk; True when the user answered "all". Raises _Quit on "q"."""
    for number, hunk in enumerate(hunks, 1):
        if plan is None:
            text = _notebook_text(result)
        else:
            text = _hunk_text(plan, hunk, number, len(hunks))
        show(text)
        answer = _answer(ask, show)
        if answer == "y":
            hunk.accepted = True
        elif answer == "a":
            for rest in hunks[number - 1:]:
                rest.accepted = True
            return True
        elif answer == "d":
            return False
        elif answer == "q":
            raise _Quit
    return False


def _answer(ask: Callable[[str], str], show: Callable[[str], None]) -> str:
    while True:
        try:
            reply = ask(PROMPT)
        except EOFError:
            return "q"
        answer = ANSWERS.get((reply or "").strip().lower())
        if answer:
            return answer
        show(HELP)


# -- assembling ------------------------------------------------------------------------------


def _with(result: FileResult, migrated: bytes) -> FileResult:
    return dataclasses.replace(result, migrated=migrated, was_changed=False)


def _assemble(result: FileResult, plan: _Plan | None, asked: list[_Hunk], show) -> FileResult:
    accepted = [h for h in asked if h.accepted]
    if not accepted:
        return _with(result, result.original)
    if len(accepted) == len(asked):
        return _with(result, result.migrated)  # everything: exactly the migration's bytes
    assert plan is not None  # a notebook is a single hunk
    lines: list[str] = []
    for segment in plan.segments:
        if isinstance(segment, tuple):
            lines.extend(plan.old[segment[0]:segment[1]])
        elif any(segment is h for h in asked):
            source = plan.new[segment.j1:segment.j2] if segment.accepted else plan.old[segment.i1:segment.i2]
            lines.extend(source)
        else:
            # Some but not all hunks accepted: the helper and new imports go in, and imports
            # the migration removed stay, since a rejected site may still use them.
            lines.extend(plan.old[segment.i1:segment.i2])
            lines.extend(plan.new[segment.j1:segment.j2])
    try:
        data = "".join(lines).encode(result.encoding)
        cst.parse_module(data)
    except Exception as error:  # noqa: BLE001 - any failure keeps the file as it was
        show(
            f"{result.file.display}: the accepted hunks do not make valid Python "
            f"({type(error).__name__}: {_first_line(error)}); file left unchanged"
        )
        return _with(result, result.original)
    return _with(result, data)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


# -- cutting a file into hunks ---------------------------------------------------------------


def _split_lines(text: str) -> list[str]:
    """Lines with their endings, split at \\n, \\r\\n and \\r only (as the tokenizer does)."""
    return io.StringIO(text, newline="").readlines()


def _plan(result: FileResult) -> _Plan:
    old_text = result.original.decode(result.encoding)
    new_text = result.migrated.decode(result.encoding)
    old, new = _split_lines(old_text), _split_lines(new_text)
    old_class, new_class = _classify(old_text, len(old)), _classify(new_text, len(new))
    old_ends, new_ends = _statement_ends(old_text), _statement_ends(new_text)
    segments: list[tuple[int, int] | _Hunk] = []
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
            for hunk in _peel_support(_Hunk(a1, a2, b1, b2), old_class, new_class):
                hunk.support = _all_support(hunk, old_class, new_class)
                segments.append(hunk)
    if any(_moves_code(s, old_class, new_class) for s in segments if isinstance(s, _Hunk)):
        # The alignment pairs lines that do not belong together; cutting it would let an
        # answer drop or duplicate code. Ask about the whole file at once instead.
        segments = [_Hunk(0, len(old), 0, len(new))]
    return _Plan(result, old, new, segments, old_class, new_class)


def _is_blank(line: str) -> bool:
    return not line.strip()


def _moves_code(hunk: _Hunk, old_class: Sequence[str], new_class: Sequence[str]) -> bool:
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
        return statement.name.value == HELPER_NAME
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
    return False


def _all_support(hunk: _Hunk, old_class: Sequence[str], new_class: Sequence[str]) -> bool:
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


def _peel_support(hunk: _Hunk, old_class, new_class) -> list[_Hunk]:
    """Cut helper/import lines off the front and the back of a hunk that also changes code."""
    if _all_support(hunk, old_class, new_class):
        return [hunk]
    i1, i2, j1, j2 = hunk.i1, hunk.i2, hunk.j1, hunk.j2
    front = []
    a, b = _support_run(old_class[i1:i2]), _support_run(new_class[j1:j2])
    if a or b:
        front = [_Hunk(i1, i1 + a, j1, j1 + b)]
        i1, j1 = i1 + a, j1 + b
    back = []
    a = _support_run(reversed(old_class[i1:i2]))
    b = _support_run(reversed(new_class[j1:j2]))
    if a or b:
        back = [_Hunk(i2 - a, i2, j2 - b, j2)]
        i2, j2 = i2 - a, j2 - b
    middle = [_Hunk(i1, i2, j1, j2)] if (i1, j1) != (i2, j2) else []
    return [*front, *middle, *back]


# -- showing ---------------------------------------------------------------------------------


def _is_notebook(result: FileResult) -> bool:
    return result.file.path.suffix.lower() == ".ipynb"


def _notebook_text(result: FileResult) -> str:
    diff = diffing.unified_diff(
        result.original.decode(result.encoding),
        result.migrated.decode(result.encoding),
        result.file.display,
        CONTEXT,
        **_cell_sections(),
    )
    return f"{result.file.display}: notebook, asked as one hunk\n{diff.rstrip()}"


def _cell_sections() -> dict:
    """Name each hunk of a notebook's diff after its cell, where diffing can."""
    headers = getattr(diffing, "notebook_cell_headers", None)
    return {"section": headers} if headers else {}


def _range(start: int, length: int) -> str:
    """A unified-diff range: 1-based start (the line before, for an empty range) and length."""
    if length == 0:
        return f"{start},0"
    return f"{start + 1}" if length == 1 else f"{start + 1},{length}"


def _hunk_text(plan: _Plan, hunk: _Hunk, number: int, total: int) -> str:
    display = plan.result.file.display
    old, new = plan.old, plan.new
    before = old[max(0, hunk.i1 - CONTEXT):hunk.i1]
    after = old[hunk.i2:hunk.i2 + CONTEXT]
    old_start, new_start = hunk.i1 - len(before), hunk.j1 - len(before)
    old_len = len(before) + hunk.i2 - hunk.i1 + len(after)
    new_len = len(before) + hunk.j2 - hunk.j1 + len(after)
    lines = [f"{display}: hunk {number} of {total}"]
    if number == 1 and plan.support:
        count = len(plan.support)
        lines.append(
            f"({count} more hunk{'s' if count > 1 else ''} of this file "
            f"add{'' if count > 1 else 's'} the {HELPER_NAME} "
            "helper and imports; they are applied with the first hunk you accept here)"
        )
    last = max(hunk.i2, hunk.i1 + 1)
    for finding in plan.result.findings:
        if hunk.i1 + 1 <= finding.line <= last:
            lines.append(f"{display}:{finding.line}:{finding.col}: {finding.code} {finding.message}")
    lines += [
        f"--- a/{display}",
        f"+++ b/{display}",
        f"@@ -{_range(old_start, old_len)} +{_range(new_start, new_len)} @@",
    ]
    lines += [" " + _bare(line) for line in before]
    lines += ["-" + _bare(line) for line in old[hunk.i1:hunk.i2]]
    lines += ["+" + _bare(line) for line in new[hunk.j1:hunk.j2]]
    lines += [" " + _bare(line) for line in after]
    return "\n".join(lines)


def _bare(line: str) -> str:
    return line.rstrip("\r\n")
