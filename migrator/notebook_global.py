"""`--style global` over a notebook: its Python cells read as one module by the global pass,
then cut back into cells for the per-cell migration.

Split out of migrator/notebooks.py (one concern per module). The per-cell migration it ends
with is passed in by migrator/notebooks.py (`migrate_cells`), which calls this module, so that
the two modules do not import each other.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable

from migrator.notebook_cells import Cell, CellResult, parse, statements
from transforms.reading.ipython_lines import (
    SCOPED_CELL_MAGICS, CellFailed, mask, split, unique_tag, unmask,
)
from migrator.options import MigrationOptions
from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.pipeline import might_need_migration


class _GlobalUnavailable(Exception):
    """The global style cannot be applied to this notebook; `cell` / `line` say where."""

    def __init__(self, message: str, cell: int, line: int = 1, col: int = 1):
        super().__init__(message)
        self.message, self.cell, self.line, self.col = message, cell, line, col


def migrate_cells_global(
    cells: list[Cell], options: MigrationOptions,
    migrate_cells: Callable[[list[Cell], MigrationOptions], list[CellResult]],
) -> list[CellResult]:
    """`--style global` over a notebook: the notebook's Python cells, in order, are one module.

    The global pass (transforms.global_view, through the same `migrate_global_then_faithful` a
    `.py` module goes through) sees that module whole, with a marker line between cells, so a
    step defined in one cell and called from a function of another is followed as in a `.py`
    file, and what it adds at module level goes in once: the imports into the first cell with
    code, after its imports, the one `_mesh` function above the first definition. Neither
    relies on an import in a later cell: one that binds a name only below where the new code
    reads it is imported again at the top (transforms/imports.py). The module is then cut at
    the markers and what the global pass left goes through the faithful cell-by-cell migration
    of migrator/notebooks.py, passed in as `migrate_cells` (each helper once, in the first
    cell that needs it). Findings of both passes go back to their cell and line.

    Where the notebook cannot be read as one module, nothing is guessed: every cell is migrated
    faithfully and a PM607 finding says why (a cell that does not parse as module code, a
    `%%timeit` cell the global pass would edit, whose definitions do not outlive it, or an
    IPython line, kept as text, that reads a name the notebook defines, a call the analysis
    could not see). So do the global pass's own findings (PM601-PM610) for each site that stays
    faithful.
    """
    from transforms.codes.global_view import SITE as GLOBAL_SITE
    from transforms.global_view.pipeline_hook import migrate_global_then_faithful
    from transforms.pipeline import MigrationResult

    if not any(might_need_migration(cell.text.encode("utf-8")) for cell in cells):
        return migrate_cells(cells, options)
    tag = unique_tag(*(cell.text for cell in cells))
    masks = [mask(cell.text, tag) for cell in cells]
    try:
        module, spans, added_newline = _one_module(cells, masks, tag)
    except _GlobalUnavailable as unavailable:
        return _faithful_instead(cells, options, unavailable, migrate_cells)
    state: dict[str, list[CellResult]] = {}

    def faithful(source: bytes, target, ignored) -> MigrationResult:
        """The faithful pass over what the global pass left, cell by cell; its findings at
        their lines in `source`."""
        texts, starts = _cut_cells(source.decode("utf-8"), tag, cells, masks, spans, added_newline)
        state["texts"] = texts
        edited = [Cell(cell.index, text) for cell, text in zip(cells, texts)]
        results = migrate_cells(edited, options)
        state["results"] = results
        findings = [dataclasses.replace(f, line=f.line + starts[k] - 1)
                    for k, result in enumerate(results) if k in starts for f in result.findings]
        return MigrationResult(source=source, findings=findings, _original=source)

    def global_pass(top_level: bool):
        merged = migrate_global_then_faithful(module.encode("utf-8"), options.target,
                                              options.ignored, faithful, top_level=top_level)
        if any(f.code == GLOBAL_SITE for f in merged.findings):
            # Values change layout only at global sites (pmap's contract, PM612, keeps them).
            _check_global_edits(cells, masks, state["texts"])
        return merged

    try:
        try:
            merged = global_pass(top_level=True)
        except _GlobalUnavailable:
            # The cells' top-level code, read as a caller, changes values an IPython line
            # reads: its sites keep pmap's contract instead, as the line expects.
            merged = global_pass(top_level=False)
    except _GlobalUnavailable as unavailable:
        return _faithful_instead(cells, options, unavailable, migrate_cells)
    results = state["results"]
    for result in results:
        result.findings = []
    for finding in merged.findings:
        k, line = _cell_of(finding.line, spans)
        message = finding.message
        if finding.code.startswith("PM6"):  # the global pass names module lines: name cells
            message = re.sub(r"\bline (\d+)\b", lambda m: "cell {}, line {}".format(
                cells[_cell_of(int(m[1]), spans)[0]].index + 1, _cell_of(int(m[1]), spans)[1]), message)
        results[k].findings.append(dataclasses.replace(finding, line=line, message=message))
    for result in results:
        result.findings.sort(key=lambda f: (f.line, f.col, f.code))
    return results


def _one_module(cells, masks, tag: str) -> tuple[str, dict[int, tuple[int, int]], set[int]]:
    """The Python cells as one module, a marker line before each but the first; for each cell
    (by position) its first line in the module and its line count; the cells whose last line
    got a line end here."""
    parts: list[str] = []
    spans: dict[int, tuple[int, int]] = {}
    added_newline: set[int] = set()
    line = 1
    for k, (cell, masked) in enumerate(zip(cells, masks)):
        if masked is None:  # a cell magic whose body is not Python: not part of the module
            continue
        try:
            parse(masked.text)
            ast.parse(masked.text)  # the global pass reads module code (no top-level await)
        except (SyntaxError, ValueError, RecursionError) as error:
            raise _GlobalUnavailable(
                f"`--style global` is not available in this notebook: this cell does not parse "
                f"as module code ({getattr(error, 'msg', error)}); every cell is migrated in the "
                "faithful style", k, min(max(getattr(error, "lineno", 1) or 1, 1), max(masked.line_count, 1)),
            ) from None
        if parts:
            parts.append(f'"{tag}_cell_{k}__"\n')
            line += 1
        text = masked.text
        if text and not text.endswith(("\n", "\r")):
            text += "\n"
            added_newline.add(k)
        spans[k] = (line, len(split(text)))
        parts.append(text)
        line += spans[k][1]
    return "".join(parts), spans, added_newline


def _cut_cells(
    text: str, tag: str, cells, masks, spans, added_newline
) -> tuple[list[str], dict[int, int]]:
    """The module cut back into cells at the markers, IPython lines put back (a cell outside
    the module keeps its text), and each module cell's first line in `text`."""
    order = sorted(spans)
    markers = {f'"{tag}_cell_{k}__"': k for k in order[1:]}
    pieces: dict[int, list[str]] = {order[0]: []} if order else {}
    starts: dict[int, int] = {order[0]: 1} if order else {}
    current = order[0] if order else None
    for number, (content, newline) in enumerate(split(text), start=1):
        k = markers.get(content)
        if k is not None:
            if k in pieces or k < current:
                raise _GlobalUnavailable(
                    "`--style global` is not available in this notebook: the global pass moved "
                    "a cell boundary; every cell is migrated in the faithful style", k)
            pieces[k], starts[k], current = [], number + 1, k
            continue
        pieces[current].append(content + newline)
    if set(pieces) != set(order):
        missing = min(set(order) - set(pieces))
        raise _GlobalUnavailable(
            "`--style global` is not available in this notebook: the global pass removed a cell "
            "boundary; every cell is migrated in the faithful style", missing)
    texts = []
    for k, cell in enumerate(cells):
        if k not in pieces:
            texts.append(cell.text)
            continue
        lead, lines = _tidy(pieces[k], cell.text)
        starts[k] += lead
        piece = "".join(lines)
        if k in added_newline and piece.endswith("\n"):
            piece = piece[:-1]
        try:
            texts.append(unmask(piece, masks[k]))
        except CellFailed:
            raise _GlobalUnavailable(
                "`--style global` is not available in this notebook: the global pass edited an "
                "IPython line of this cell; every cell is migrated in the faithful style", k
            ) from None
    return texts, starts


def _tidy(lines: list[str], original: str) -> tuple[int, list[str]]:
    """No more blank lines at the start and the end of a cell than it had (the global pass pads
    what it inserts for a module, where the cell boundary does not count); how many leading
    ones went, and the lines."""
    def blank_run(items):
        count = 0
        for item in items:
            if item.strip():
                break
            count += 1
        return count

    before = [c + n for c, n in split(original)]
    lead = max(0, blank_run(lines) - blank_run(before))
    lines = lines[lead:]
    trail = max(0, blank_run(reversed(lines)) - blank_run(reversed(before)))
    return lead, lines[: len(lines) - trail] if trail else lines


def _check_global_edits(cells, masks, texts: list[str]) -> None:
    """Refuse what the global pass cannot see in a notebook (see `migrate_cells_global`)."""
    if all(text == cell.text for cell, text in zip(cells, texts)):
        return
    for k, (cell, masked, text) in enumerate(zip(cells, masks, texts)):
        if masked is not None and masked.cell_magic in SCOPED_CELL_MAGICS and text != cell.text:
            raise _GlobalUnavailable(
                f"`--style global` is not available in this notebook: the global pass would edit "
                f"this `%%{masked.cell_magic}` cell, whose definitions do not outlive it; every "
                "cell is migrated in the faithful style", k)
    defined: set[str] = set()
    for masked in masks:
        if masked is not None:
            defined |= _bound_by_code(ast.parse(masked.text))
    for k, masked in enumerate(masks):
        for number, line in masked.ipython if masked is not None else ():
            if line.startswith("%%"):  # the cell magic line: its words are not Python
                continue
            read = sorted(set(re.findall(r"[A-Za-z_]\w*", line)) & defined)
            if read:
                raise _GlobalUnavailable(
                    f"`--style global` is not available in this notebook: the IPython line "
                    f"`{line.strip()}` reads `{read[0]}`, which the global analysis cannot follow "
                    "there; every cell is migrated in the faithful style", k, number)


def _bound_by_code(tree: ast.Module) -> set[str]:
    """Names a cell binds in the notebook's namespace other than by imports."""
    names: set[str] = set()
    for statement in statements(tree.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
            continue
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _cell_of(line: int, spans) -> tuple[int, int]:
    """The cell (by position) and the line in it of a line of the original module."""
    found = min(spans)
    for k in sorted(spans):
        if spans[k][0] <= line:
            found = k
    start, count = spans[found]
    return found, min(max(line - start + 1, 1), max(count, 1))


def _faithful_instead(
    cells, options, unavailable: _GlobalUnavailable, migrate_cells
) -> list[CellResult]:
    results = migrate_cells(cells, options)
    finding = Finding(Code.GLOBAL_VIEW_UNAVAILABLE,
                      unavailable.line, unavailable.col, unavailable.message)
    results[unavailable.cell].findings = sorted(
        [*results[unavailable.cell].findings, finding], key=lambda f: (f.line, f.col, f.code))
    return results
