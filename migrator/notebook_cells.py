"""A notebook's code cells as the per-cell migration (migrator/notebooks.py) and the
`--style global` path (migrator/notebook_global.py) both handle them: the cell and its result,
and a cell's text as Python. Shared by both, so that neither imports the other.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings

from transforms.reading.ipython_lines import Masked
from transforms.codes.findings import Finding

_COMPILE_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # IPython allows top-level await


@dataclasses.dataclass
class Cell:
    index: int  # among all cells
    text: str


@dataclasses.dataclass
class CellResult:
    text: str
    findings: list[Finding]
    tree: ast.Module | None = None  # the migrated cell as Python, None when not Python
    original_tree: ast.Module | None = None
    masked: Masked | None = None
    words: set[str] = dataclasses.field(default_factory=set)  # names this cell refers to


def parse(text: str) -> ast.Module:
    with warnings.catch_warnings():  # e.g. invalid escape sequences: not ours to report
        warnings.simplefilter("ignore")
        return compile(text, "<cell>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True)


def statements(body: list[ast.stmt]):
    """Statements that run in the cell's namespace: compound bodies, not functions or classes."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from statements(getattr(statement, field, []) or [])
        for handler in getattr(statement, "handlers", []) or []:
            yield from statements(handler.body)
        for case in getattr(statement, "cases", []) or []:
            yield from statements(case.body)
