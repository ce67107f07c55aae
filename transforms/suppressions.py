"""`# pmap-migrate: ignore[CODE, ...]` comments: leave a site alone, on purpose and visibly.

A comment on a site's line or on the line above covers that site. Without codes it covers
every code; with a code of a site's rewrite (PM100, PM600, PM612) it covers the rewrite in
either style. A covered site is not rewritten and is reported as suppressed (PM011); a comment
that covered nothing is reported as unused (PM012), like ruff's RUF100.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize

from transforms.codes import Code
from transforms.codes.findings import Finding

SITE_REWRITES = frozenset({Code.PMAP_MIGRATED, Code.GLOBAL_VIEW_SITE, Code.GLOBAL_VIEW_CONTRACT})
MARKER = re.compile(r"#\s*pmap-migrate:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s]*)\])?")


@dataclasses.dataclass
class Suppression:
    line: int
    col: int
    codes: frozenset[str]  # empty: every code
    used: bool = False

    def matches(self, code: str) -> bool:
        # The codes of a site's rewrite in either style are one request: leave this pmap as
        # written (`ignore[PM600]` also holds back the faithful rewrite the global style
        # falls back to).
        return not self.codes or code in self.codes or (
            code in SITE_REWRITES and bool(self.codes & SITE_REWRITES))


class Suppressions:
    """Comment suppressions of one file, plus the codes the project configuration ignores
    there (those are silent: the user turned them off)."""

    def __init__(self, items: list[Suppression], ignored: frozenset[str] = frozenset()):
        self._by_line = {s.line: s for s in items}
        self.ignored = ignored

    @property
    def has_comments(self) -> bool:
        """Whether any line can be suppressed: without comments, `covers` ignores `line`."""
        return bool(self._by_line)

    @classmethod
    def from_source(cls, source: bytes, ignored: frozenset[str] = frozenset()) -> Suppressions:
        if b"pmap-migrate:" not in source:
            return cls([], ignored)
        items = []
        try:
            for token in tokenize.tokenize(io.BytesIO(source).readline):
                if token.type != tokenize.COMMENT:
                    continue
                match = MARKER.search(token.string)
                if match:
                    codes = match["codes"] or ""
                    items.append(Suppression(
                        token.start[0], token.start[1] + 1,
                        frozenset(c.strip().upper() for c in codes.split(",") if c.strip()),
                    ))
        except (tokenize.TokenError, SyntaxError):
            pass  # the parser reports the file; nothing to suppress
        return cls(items, ignored)

    def covers(self, line: int, code: str) -> str | None:
        """"config" when the configuration ignores `code`; "comment" when a comment on `line`
        or the line above suppresses it (the comment is then used); else None."""
        if code in self.ignored:
            return "config"
        for candidate in (line, line - 1):
            suppression = self._by_line.get(candidate)
            if suppression and suppression.matches(code):
                suppression.used = True
                return "comment"
        return None

    def unused(self) -> list[Finding]:
        return [
            Finding(Code.UNUSED_SUPPRESSION,
                    s.line, s.col, "unused suppression: nothing here is reported"
                    + (f" as {', '.join(sorted(s.codes))}" if s.codes else ""))
            for s in self._by_line.values() if not s.used
        ]
