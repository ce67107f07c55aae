"""`apply --interactive`: approve the migration hunk by hunk, as `git add -p` does.

`select_changes` takes the full results of a run (contents included, not `slim()` ones) and
returns them with `.migrated` replaced by the version the user accepted (the original bytes
when nothing of a file was accepted). Writing stays with the caller (`runner.write_result`).

How a file is cut into hunks, and which of them are *support* hunks (the generated helper
and imports) that are not asked, is `interactive_hunks`' job. Support hunks are applied iff
at least one other hunk of the file is accepted, since the accepted sites call the helper
and use the imports. An import line the migration removed (``from jax import pmap``) is
removed only when every hunk of the file is accepted, because a rejected site may still use
it; otherwise it is kept next to the new imports.

A notebook is asked as one hunk (its JSON is not Python; the runner already checked it).

After assembling, the new text is parsed with libcst; when it does not parse the file is left
unchanged and `show` says so.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable

import libcst as cst

from migrator import diffing
from migrator.interactive_hunks import Hunk, Plan, plan_hunks
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
            hunks = [Hunk(0, 0, 0, 0)]
        else:
            plan = plan_hunks(result)
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
    result: FileResult, plan: Plan | None, hunks: list[Hunk], ask, show
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


def _assemble(result: FileResult, plan: Plan | None, asked: list[Hunk], show) -> FileResult:
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


def _hunk_text(plan: Plan, hunk: Hunk, number: int, total: int) -> str:
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
