"""IPython syntax in a notebook cell, masked so that the cell parses as Python, and put back.

Split out of migrator/notebooks.py (one concern per module): the per-cell migration there and
the `--style global` path in migrator/notebook_global.py both mask a cell before parsing it and
unmask what the migration left.

IPython syntax is masked before parsing: each line magic, shell escape (`!cmd`, `x = !cmd`),
help line (`obj?`, `??obj`) or autocall escape (`/f x`) that starts a logical line (a small
scanner follows brackets, strings and backslash continuations) becomes a string statement
`"__pmap_migrate_nb_<k>__"` with the same indentation: valid Python in any block, and a header
statement like a docstring, so imports and the helper go after a leading `%%time` or
`!pip install`. The tag occurs nowhere in the cell. After migration every placeholder line is
put back exactly; one missing or doubled makes the cell fail safe (untouched, PM005). A cell
opened by a cell magic whose body is not Python (`%%bash`, `%%writefile`, ...) is not touched.
"""

from __future__ import annotations

import dataclasses
import re

from transforms.codes import Code
from transforms.codes.findings import Finding

# Cell magics whose body is Python run by IPython; any other cell magic leaves the cell alone.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
# Of those, the ones whose body runs in a scope of its own: definitions do not outlive the cell.
SCOPED_CELL_MAGICS = frozenset({"timeit"})
# Line magics whose argument is Python code: pmap there is reported, since it is not migrated.
PYTHON_LINE_MAGICS = frozenset({"time", "timeit", "prun"})

_ESCAPES = "%!?/,;"  # IPython escapes; none of them can start a Python statement
_ASSIGN_ESCAPE = re.compile(r"[ \t]*[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[%!]")
_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n|)")
_PMAP_WORD = re.compile(r"\bpmap\b")


# Raised by `unmask` here and by the per-cell migration in migrator/notebooks.py; it lives in
# this module, the lowest of the notebook modules, so that none of them imports another in a cycle.
class CellFailed(Exception):
    """A cell cannot be migrated: it is left untouched, with a finding (`code`, `message`,
    `line`, `col`)."""

    def __init__(self, code: str, message: str, line: int = 1, col: int = 1):
        super().__init__(message)
        self.code, self.message, self.line, self.col = code, message, line, col


class _Scanner:
    """Just enough of Python's tokenizer to know whether a physical line starts a statement:
    open brackets, open strings and backslash continuations carry over to the next line."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the delimiter that closes the open string
        self.backslash = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.backslash

    def copy(self) -> _Scanner:
        twin = _Scanner()
        twin.depth, twin.quote, twin.backslash = self.depth, self.quote, self.backslash
        return twin

    def feed(self, line: str) -> str:
        """Advance over one line (without its line end); return its last code character."""
        self.backslash = False
        escaped_end = False
        last = ""
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if self.quote is not None:
                if ch == "\\":
                    escaped_end = i == n - 1
                    i += 2
                elif line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    last = '"'
                else:
                    i += 1
                continue
            if ch == "#":
                break
            if ch in "'\"":
                self.quote = line[i : i + 3] if line[i : i + 3] in ("'''", '"""') else ch
                i += len(self.quote)
                continue
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            elif ch == "\\" and i == n - 1:
                self.backslash = True
                break
            if not ch.isspace():
                last = ch
            i += 1
        if self.quote in ("'", '"') and not escaped_end:
            self.quote = None  # an unterminated one-line string: a syntax error, found later
        return last


def _is_escape_line(line: str) -> bool:
    stripped = line.lstrip(" \t")
    return (stripped[:1] != "" and stripped[0] in _ESCAPES) or _ASSIGN_ESCAPE.match(line) is not None


@dataclasses.dataclass
class Masked:
    """A cell as Python: IPython lines replaced by placeholder strings."""

    text: str
    originals: dict[str, str]  # placeholder line -> original line, both without line ends
    ipython: list[tuple[int, str]]  # (line number, original line) of every masked line
    line_count: int
    cell_magic: str | None = None


def split(text: str) -> list[tuple[str, str]]:
    """Lines as Python sees them ('\\n', '\\r\\n' or '\\r'), each as (content, line end)."""
    lines = []
    for match in _LINE.finditer(text):
        if match.group(0) == "":
            break
        lines.append((match.group(1), match.group(2)))
    return lines


def unique_tag(*texts: str) -> str:
    tag, number = "__pmap_migrate_nb", 0
    while any(tag in text for text in texts):
        number += 1
        tag = f"__pmap_migrate_nb{number}"
    return tag


def mask(text: str, tag: str) -> Masked | None:
    """None when the cell is run by a cell magic whose body is not Python."""
    lines = split(text)
    out: list[str] = []
    originals: dict[str, str] = {}
    ipython: list[tuple[int, str]] = []

    def placeholder(number: int, content: str, indent: str, newline: str) -> None:
        masked = f'{indent}"{tag}_{number}__"'
        originals[masked] = content
        ipython.append((number, content))
        out.append(masked + newline)

    cell_magic = None
    first = next((k for k, (content, _) in enumerate(lines) if content.strip()), None)
    if first is not None and lines[first][0].startswith("%%"):
        cell_magic = re.match(r"%%(\S*)", lines[first][0]).group(1)
        if cell_magic not in PYTHON_CELL_MAGICS:
            return None

    scanner = _Scanner()
    continued_indent: str | None = None  # an escaped line ending in a backslash goes on
    for number, (content, newline) in enumerate(lines, start=1):
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        if continued_indent is not None:
            placeholder(number, content, continued_indent, newline)
            continued_indent = continued_indent if content.endswith("\\") else None
            continue
        if number - 1 == first and cell_magic is not None:
            placeholder(number, content, "", newline)
            continue
        if scanner.at_statement_start() and _is_escape_line(content):
            placeholder(number, content, indent, newline)
            continued_indent = indent if content.endswith("\\") else None
            continue
        before = scanner.copy() if scanner.at_statement_start() else None
        last = scanner.feed(content)
        if before is not None and last == "?" and scanner.at_statement_start():
            scanner = before  # `obj?` / `obj??`: help, not Python
            placeholder(number, content, indent, newline)
            continue
        out.append(content + newline)
    return Masked("".join(out), originals, ipython, len(lines), cell_magic)


def unmask(text: str, masked: Masked) -> str:
    out = []
    seen: set[str] = set()
    for content, newline in split(text):
        if content in masked.originals:
            if content in seen:
                raise CellFailed(Code.INTERNAL_ERROR, "an IPython line placeholder was duplicated")
            seen.add(content)
            content = masked.originals[content]
        out.append(content + newline)
    if len(seen) != len(masked.originals):
        raise CellFailed(Code.INTERNAL_ERROR, "an IPython line placeholder was lost")
    return "".join(out)


def pmap_in_ipython_lines(masked: Masked) -> list[Finding]:
    """pmap in a `%time`-like line runs as Python but is kept byte for byte: say so."""
    findings = []
    for number, line in masked.ipython:
        magic = re.match(r"[ \t]*(?:[\w.,\s]+=[ \t]*)?%{1,2}(\w+)", line)
        if not magic or magic.group(1) not in PYTHON_LINE_MAGICS | PYTHON_CELL_MAGICS:
            continue
        for word in _PMAP_WORD.finditer(line):
            findings.append(Finding(
                Code.PMAP_AS_VALUE, number, word.start() + 1,
                f"pmap in the IPython line `{line.strip()}` is not migrated (magic lines are "
                "kept byte for byte); move the code out of the magic",
            ))
            break
    return findings
