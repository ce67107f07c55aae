"""A finding: one thing the tool says about one place in a file."""

from __future__ import annotations

import dataclasses

from transforms.codes.rules import rule


@dataclasses.dataclass(frozen=True)
class Finding:
    code: str
    line: int
    col: int
    message: str
    path: str = ""
    cell: int | None = None  # notebooks: the cell's number, 1-based among all cells, as Jupyter shows it
    # A pointer finding's blocker (PM608: the call or caller that keeps the site from going
    # global), so the site's one finding can name it (global_view/site_findings.py). Not
    # serialised, and not part of equality.
    cause: Finding | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def severity(self) -> str:
        return rule(self.code).severity

    @property
    def check(self) -> str:
        """What the user must check or do."""
        return rule(self.code).check

    @property
    def needs_human(self) -> bool:
        return self.severity == "warning"

    def at(self, path: str) -> Finding:
        return dataclasses.replace(self, path=path)

    def to_text(self) -> str:
        where = f"{self.path}:cell {self.cell}" if self.cell is not None else self.path
        return f"{where}:{self.line}:{self.col}: {self.code} {self.severity} {self.message}"

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "cell": self.cell,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "name": rule(self.code).name,
            "severity": self.severity,
            "fix": rule(self.code).fix,
            "message": self.message,
            "check": self.check,
        }
