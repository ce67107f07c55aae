"""Unified diffs that `git apply` and `patch -p1` accept, byte for byte."""

from __future__ import annotations

import re
from typing import Callable, Iterator

from transforms.line_matcher import LineMatcher

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
    for line in _difflib_unified_diff(
        old_lines, new_lines, "/dev/null" if new_file else f"a/{display}", f"b/{display}",
        context,
    ):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\r\n") + "\n"
        elif section and line.startswith("@@"):
            start = int(re.match(r"@@ -(\d+)", line).group(1))
            line = line.rstrip("\n") + f" {section(old_lines, start + context)}\n"
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out)


def _difflib_unified_diff(a: list[str], b: list[str], fromfile: str, tofile: str,
                          context: int) -> Iterator[str]:
    """`difflib.unified_diff(a, b, fromfile, tofile, n=context)`, line for line, with its
    SequenceMatcher's blocks found by `LineMatcher`: difflib's own search is quadratic on a
    generated file of thousands of sites (most of a faithful `diff` of a 5 MB file)."""
    started = False
    for group in LineMatcher(a, b, autojunk=True).get_grouped_opcodes(context):
        if not started:
            started = True
            yield f"--- {fromfile}\n"
            yield f"+++ {tofile}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_unified_range(first[1], last[2])} +{_unified_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def _unified_range(start: int, stop: int) -> str:
    """A hunk's range as difflib writes it: `start,length`, `start` alone for one line."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if not length else start + 1},{length}"


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
