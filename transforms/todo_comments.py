"""`# TODO(pmap-migrate): PM504 <reason>` comments: advice that outlives `apply`.

A warning (a human must act) is found in the pmap-era code; once `apply` has rewritten the
site around it, the code may no longer match, and a later `scan` or `diff` (the pre-commit
hook) would say nothing. So the migrated code says it: in a module the migration changes,
every warning gets a comment on the line above its statement (a module left as it was shows
its warnings to the next run itself), and a later run reports each such comment as a finding of the same
code, until a human removes it. A comment already there is not added again, and a TODO whose
site the tool reports again anyway is not reported twice. PM012 (an unused suppression) gets
none: its own comment is what a later run reports.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import io
import re
import tokenize
from collections.abc import Iterable

from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.codes.rules import rule

TODO_WORD = b"TODO(pmap-migrate)"
_TODO = re.compile(r"#\s*TODO\(pmap-migrate\):\s*(?P<code>PM\d{3})\b[ \t]*(?P<reason>.*)")
MAX_LINE = 99  # a comment line the tool writes is never longer
NO_TODO = frozenset({Code.UNUSED_SUPPRESSION})


def wants_todo(finding: Finding) -> bool:
    return finding.severity == "warning" and finding.code not in NO_TODO and finding.line >= 1


def todo_text(code: str, indent: str) -> str:
    """The comment line for `code` at `indent`, at most MAX_LINE characters where the indent
    leaves room (the reason is cut at a word)."""
    head = f"{indent}# TODO(pmap-migrate): {code}"
    reason = rule(code).todo or rule(code).name
    while reason and len(head) + 1 + len(reason) > MAX_LINE:
        reason = reason.rpartition(" ")[0]
    return f"{head} {reason}" if reason else head


@dataclasses.dataclass(frozen=True)
class Todo:
    code: str
    line: int  # 1-based
    col: int
    reason: str


def existing_todos(source: bytes) -> list[Todo]:
    """The TODO comments in `source`, each alone on its line (a comment token, so never text
    inside a string)."""
    if TODO_WORD not in source:
        return []
    found = []
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.COMMENT or token.line.strip() != token.string.strip():
                continue
            match = _TODO.match(token.string)
            if match:
                found.append(Todo(match["code"], token.start[0], token.start[1] + 1,
                                  match["reason"].strip()))
    except (tokenize.TokenError, SyntaxError):
        return []
    return found


def todo_findings(source: bytes, tree: ast.Module | None, reported: Iterable[Finding]
                  ) -> list[Finding]:
    """A finding for each TODO comment in `source`, unless the statement below it is reported
    with the same code by the run itself (`reported`, in `source`'s lines)."""
    todos = existing_todos(source)
    if not todos:
        return []
    spans = _Statements(tree) if tree is not None else None
    by_code: dict[str, list[int]] = {}
    for finding in reported:
        by_code.setdefault(finding.code, []).append(finding.line)
    findings = []
    for todo in todos:
        below = spans.below(todo.line) if spans is not None else None
        if below and any(below[0] <= line <= below[1] for line in by_code.get(todo.code, ())):
            continue
        reason = todo.reason or rule(todo.code).name
        findings.append(Finding(todo.code, todo.line, todo.col, f"{reason} (a TODO comment an "
                                "earlier run left: remove it once done)"))
    return findings


def add_todos(source: bytes, findings: Iterable[Finding], tree: ast.Module | None
              ) -> tuple[bytes, list[int]]:
    """`source` with a TODO comment above the statement of each finding that wants one and
    has none yet, and the (sorted, 1-based) lines of `source` each comment went above."""
    if tree is None:
        return source, []
    lines = source.splitlines(keepends=True)
    newline = b"\r\n" if b"\r\n" in source else b"\n"
    spans = _Statements(tree)
    have = {(todo.line, todo.code) for todo in existing_todos(source)}
    wanted: dict[int, list[str]] = {}
    for finding in findings:
        if not wants_todo(finding) or finding.line > len(lines):
            continue
        start = spans.start_of(finding.line)
        if start is None or finding.code in wanted.get(start, []):
            continue
        above, present = start - 1, False
        while above >= 1 and lines[above - 1].lstrip().startswith(b"#"):
            present = present or (above, finding.code) in have
            above -= 1
        if not present:
            wanted.setdefault(start, []).append(finding.code)
    if not wanted:
        return source, []
    out: list[bytes] = []
    inserted: list[int] = []
    for number, text in enumerate(lines, start=1):
        for code in sorted(wanted.get(number, ())):
            indent = text[: len(text) - len(text.lstrip(b" \t"))].decode("ascii", "replace")
            out.append(todo_text(code, indent).encode("ascii") + newline)
            inserted.append(number)
        out.append(text)
    return b"".join(out), inserted


class _Statements:
    """Where statements start: the line a comment above a line's statement goes on."""

    def __init__(self, tree: ast.Module):
        self.headers: list[tuple[int, int]] = []  # (start, end of the header or statement)
        self.whole: list[tuple[int, int]] = []  # (start, end_lineno)
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt):
                continue
            start = min([d.lineno for d in getattr(node, "decorator_list", ())] + [node.lineno])
            body = getattr(node, "body", None)
            end = node.end_lineno or node.lineno
            header = max(start, body[0].lineno - 1) if isinstance(body, list) and body else end
            self.headers.append((start, header))
            self.whole.append((start, end))
        self.headers.sort()
        self.whole.sort()

    def start_of(self, line: int) -> int | None:
        """The start of the innermost statement whose own lines (a compound statement's
        header) hold `line`, else of the innermost statement that holds it."""
        for spans in (self.headers, self.whole):
            holding = [start for start, end in spans if start <= line <= end]
            if holding:
                return max(holding)
        return None

    def below(self, line: int) -> tuple[int, int] | None:
        """The lines of the first statement starting after `line`."""
        index = bisect.bisect_right(self.whole, (line, float("inf")))
        return self.whole[index] if index < len(self.whole) else None
