"""Unified diffs that `git apply` and `patch -p1` accept, byte for byte."""

from __future__ import annotations

import difflib
import re
from typing import Callable

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(
    old: str, new: str, display: str, context: int = 3,
    section: Callable[[list[str], int], str] | None = None, new_file: bool = False,
) -> str:
    """A diff of one file with a/ b/ headers; line endings (CRLF too) are kept as they are.
    `new_file`: the file does not exist yet, so the old side is /dev/null (as git writes it).

    `section(old_lines, first_line)` may name each hunk after its `@@ … @@` (git shows a
    function name there, and `git apply` ignores it): notebooks name the cell.
    """
    old_lines, new_lines = patch_lines(old), patch_lines(new)
    out = []
    for line in difflib.unified_diff(
        old_lines, new_lines, "/dev/null" if new_file else f"a/{display}", f"b/{display}",
        n=context,
    ):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\r\n") + "\n"
        elif section and line.startswith("@@"):
            start = int(re.match(r"@@ -(\d+)", line).group(1))
            line = line.rstrip("\n") + f" {section(old_lines, start + context)}\n"
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out)


def patch_lines(text: str) -> list[str]:
    """Lines with their endings, split at \\n only, as `git apply` and `patch` read them: a
    \\r\\n keeps its \\r, and a form feed, a lone \\r or U+2028 inside a line stays in it
    (str.splitlines would cut there and the patch would no longer match the file)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def notebook_cell_headers(old_lines: list[str], line: int) -> str:
    """The cell a line of a notebook's JSON belongs to (cells are written in order, each
    with its "cell_type" key), numbered from 1 as Jupyter and the findings number them."""
    cells = sum('"cell_type":' in text for text in old_lines[:line])
    return f"cell {max(cells, 1)}"


def colorize(diff: str) -> str:
    """ANSI colours for a terminal: headers bold, removals red, additions green."""
    out = []
    for line in patch_lines(diff):
        if line.startswith(("---", "+++")):
            out.append(f"\x1b[1m{line.rstrip(chr(10))}\x1b[0m\n")
        elif line.startswith("@@"):
            out.append(f"\x1b[36m{line.rstrip(chr(10))}\x1b[0m\n")
        elif line.startswith("-"):
            out.append(f"\x1b[31m{line.rstrip(chr(10))}\x1b[0m\n")
        elif line.startswith("+"):
            out.append(f"\x1b[32m{line.rstrip(chr(10))}\x1b[0m\n")
        else:
            out.append(line)
    return "".join(out)
