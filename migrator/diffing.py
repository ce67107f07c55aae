"""Unified diffs that `git apply` and `patch -p1` accept, byte for byte."""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, display: str, context: int = 3) -> str:
    """A diff of one file with a/ b/ headers; line endings (CRLF too) are kept as they are."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(
        old_lines, new_lines, f"a/{display}", f"b/{display}", n=context
    ):
        if line.startswith(("---", "+++")):
            line = line.rstrip("\r\n") + "\n"
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out)
