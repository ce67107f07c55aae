"""Jupyter notebooks: migrate every code cell, keep everything else byte for byte.

A notebook is one namespace split into cells. Each code cell is migrated with
`transforms.pipeline.migrate_source` as a module of its own, with what the earlier cells put
in that namespace written into it as *context* for the duration of the migration, then cut
out again:

    from functools import partial               <- the cell's header: imports, placeholders
    if __pmap_migrate_nb_context__:             <- context, put before the first other statement
        pass
        import jax                              <- imports of the earlier cells, so that
        from jax import pmap                       `@partial(pmap, ...)` here is seen as pmap
        def __pmap_migrate_nb_reads__():
            return (jax, pmap,)                 <- names read (see below)
    def _pmap_style_shard_map(*__pmap_migrate_nb_stub__, **kwargs): ...   <- each helper
                                                                            once defined
    @partial(pmap, axis_name="i")               <- the rest of the cell
    ...

- **Each helper once.** The pipeline does not insert a helper (transforms.module_helpers.
  HELPER_NAMES) into a module that already defines it at top level under its marker comment.
  A stub is such a definition, so once a cell has received a helper, later cells are migrated
  without a copy. A helper name an earlier cell uses for a function of its own is read in the
  context, so a later cell's helper gets a free name (`_device_put_sharded_2`).
  The first cell that needs it gets the real helper, inserted exactly as in a `.py` file. A
  `%%timeit` cell runs in a scope of its own, so a helper it defines does not count for later
  cells.
- **Why there.** libcst resolves a module-level name only to bindings above it, so the
  context must come before the cell's code; but the pipeline adds imports after the leading
  import block and the helper before the first non-header statement. The context therefore
  goes right after the header, taking over the leading blank lines and comments of the
  statement it precedes: whatever the pipeline inserts lands before it, and the padding it
  gives "the next statement" is given to the context and stays with the text when the
  context lines are cut. Its imports sit in an `if` block, so the pipeline's import adder
  never merges into them. Findings inside the context are dropped; later ones are shifted back.
- **Names read.** A function reading names sees every module binding. It reads the earlier
  cells' names (so a `P` imported earlier for something else is known to be taken), and the
  names later cells still use that this cell imports: the pipeline removes `from jax import
  pmap` once its module no longer uses it, but a later cell may still (a refused site, a
  `%time` line). Those are found after a first pass, and such a cell is migrated again.

IPython syntax is masked before parsing and put back after migration: see
transforms/reading/ipython_lines.py. A cell opened by a cell magic whose body is not Python (`%%bash`,
`%%writefile`, ...) is not touched.

With `--style global` the Python cells are first read as one module by the global pass, and
cut back into cells before the above: see migrator/notebook_global.py.

The JSON is read and written back in the layout it was read in (see
migrator/notebook_json.py). A notebook in which no cell changed is returned as the very bytes
it came in as.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import traceback

import libcst as cst
from libcst.metadata import PositionProvider

from migrator.notebook_cells import Cell, CellResult, parse, statements
from migrator.notebook_global import migrate_cells_global
from transforms.reading.ipython_lines import (
    SCOPED_CELL_MAGICS, CellFailed, Masked, mask, pmap_in_ipython_lines, split, unique_tag, unmask,
)
from migrator.notebook_json import NotebookDocument
from migrator.options import MigrationOptions
from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.pipeline import might_need_migration, migrate_source
from transforms.todo_comments import TODO_WORD
from transforms.module_helpers import helper_base, is_header_statement
from transforms.helpers.helper_templates import MARKER as HELPER_MARKER_WORD
from transforms.helpers.placement_helpers import HELPER_MARKER


@dataclasses.dataclass
class NotebookMigration:
    source: bytes  # the new notebook bytes (== the input when nothing changed)
    findings: list[Finding]  # line numbers relative to the cell
    cell_of: list[int]  # parallel to findings: index of the cell (among all cells)
    cell_diffs: list[tuple[int, str, str]]  # (cell index, old source, new source)

    @property
    def changed(self) -> bool:
        return bool(self.cell_diffs)


def migrate_notebook(data: bytes, options: MigrationOptions = MigrationOptions()) -> NotebookMigration:
    """Migrate every Python code cell of a notebook with `options` (those at its path: see
    MigrationOptions.for_file). Raises NotebookError if it is not one."""
    document = NotebookDocument.load(data)
    cells = document.code_cells()
    if options.style == "global" and Code.PMAP_MIGRATED not in options.ignored:
        results = migrate_cells_global(cells, options, _migrate_cells)
    else:
        results = _migrate_cells(cells, options)

    findings: list[Finding] = []
    cell_of: list[int] = []
    diffs: list[tuple[int, str, str]] = []
    for cell, result in zip(cells, results):
        for finding in result.findings:
            findings.append(finding)
            cell_of.append(cell.index)
        if result.text != cell.text:
            diffs.append((cell.index, cell.text, result.text))
            document.set_source(cell.index, result.text)
    source = document.dump() if diffs else data
    return NotebookMigration(source=source, findings=findings, cell_of=cell_of, cell_diffs=diffs)


# -- cells ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Context:
    imports: list[str]
    helpers_defined: tuple[str, ...]
    # Helper names earlier cells bind to functions of their own (`_device_put_sharded`): taken,
    # so the tool's helper gets another name (transforms/module_helpers.py).
    names_taken: tuple[str, ...] = ()


def _migrate_cells(cells: list[Cell], options: MigrationOptions) -> list[CellResult]:
    imports: list[str] = []
    helpers_defined: tuple[str, ...] = ()
    names_taken: tuple[str, ...] = ()
    contexts: list[_Context] = []
    results: list[CellResult] = []
    for cell in cells:
        context = _Context(list(imports), helpers_defined, names_taken)
        result = _migrate_cell(cell.text, context, options, keep=())
        contexts.append(context)
        results.append(result)
        scoped = result.masked is not None and result.masked.cell_magic in SCOPED_CELL_MAGICS
        if scoped:
            continue
        for tree in (result.original_tree, result.tree):
            for statement in _imports_of(tree):
                if statement not in imports:
                    imports.append(statement)
        ours, theirs = _helper_names_bound(result.tree, result.text)
        helpers_defined += tuple(name for name in ours if name not in helpers_defined)
        names_taken += tuple(name for name in theirs if name not in names_taken)

    # A cell whose migration removed an import that a later cell still uses keeps it.
    for i, (cell, result) in enumerate(zip(cells, results)):
        removed = _bound_by_imports(result.original_tree) - _bound_by_imports(result.tree)
        if not removed:
            continue
        used_later = set().union(*(later.words for later in results[i + 1 :]))
        keep = sorted(removed & used_later)
        if keep:
            results[i] = _migrate_cell(cell.text, contexts[i], options, keep=keep)
    return results


def _migrate_cell(text: str, context: _Context, options: MigrationOptions, keep) -> CellResult:
    context_text = "\n".join(context.imports)
    tag = unique_tag(text, context_text)
    masked = mask(text, tag)
    if masked is None:  # a cell magic that is not Python
        return CellResult(text, [], words=set(re.findall(r"\w+", text)))
    words = {w for _, line in masked.ipython for w in re.findall(r"\w+", line)}
    findings = pmap_in_ipython_lines(masked)
    try:
        original_tree = parse(masked.text)
    except SyntaxError as error:
        line = min(max(error.lineno or 1, 1), max(masked.line_count, 1))
        finding = Finding(Code.SYNTAX_ERROR,
                          line, (error.offset or 0) or 1, f"syntax error: {error.msg}")
        return CellResult(text, [finding], words=set(re.findall(r"\w+", text)))
    except (ValueError, RecursionError) as error:
        finding = Finding(Code.SYNTAX_ERROR, 1, 1, f"cannot parse: {error}")
        return CellResult(text, [finding], words=set(re.findall(r"\w+", text)))
    result = CellResult(text, findings, original_tree, original_tree, masked)
    result.words = words | _names(original_tree)
    data = masked.text.encode("utf-8")
    if not might_need_migration(data) and TODO_WORD not in data:
        return result
    try:
        new_text, cell_findings = _run_pipeline(
            masked, context, options, keep, tag, _bound_by_imports(original_tree)
        )
        new_tree = parse(new_text)
        restored = unmask(new_text, masked)
    except CellFailed as failed:
        result.findings = [Finding(failed.code, failed.line, failed.col, failed.message)]
        return result
    except SyntaxError as error:
        result.findings = [Finding(Code.OUTPUT_DOES_NOT_PARSE,
                                   1, 1, f"rewritten cell does not parse: {error}")]
        return result
    result.text = restored
    result.tree = new_tree
    result.words = words | _names(new_tree)
    result.findings = sorted(cell_findings + findings, key=lambda f: (f.line, f.col, f.code))
    return result


def _run_pipeline(
    masked: Masked, context: _Context, options: MigrationOptions, keep, tag: str,
    own_imports: set[str],
) -> tuple[str, list[Finding]]:
    """Migrate the masked cell with the notebook context in it; return its new text and findings.

    The context goes right before the first statement after the cell's header (its leading
    imports, docstring-like placeholders), taking over that statement's leading blank lines and
    comments: the pipeline adds imports and the helper at or before that point and pads that
    statement with blank lines, so once the context lines are cut out again, the cell reads as
    if it had been migrated alone.
    """
    body = masked.text
    try:
        wrapper = cst.MetadataWrapper(cst.parse_module(body.encode("utf-8")))
        positions = wrapper.resolve(PositionProvider)
    except cst.ParserSyntaxError as error:
        line = min(max(error.raw_line, 1), max(masked.line_count, 1))
        raise CellFailed(Code.SYNTAX_ERROR,
                         f"syntax error: {error.message}", line, error.raw_column + 1)
    except RecursionError:
        raise CellFailed(Code.INTERNAL_ERROR, "cell too deeply nested for the parser") from None
    top = wrapper.module.body
    header = 0
    while header < len(top) and is_header_statement(top[header]):
        header += 1
    lines = [c + n for c, n in split(body)]
    context_lines: list[str] = []
    insert_at = len(lines)  # 0-based index of the first line of the first non-header statement
    if header < len(top):
        first = top[header]
        decorators = getattr(first, "decorators", ())
        insert_at = positions[decorators[0] if decorators else first].start.line - 1
        context_lines = _context_lines(context, keep, tag, own_imports)
    newline = "\r\n" if "\r\n" in body else "\n"
    source = "".join(lines[:insert_at]) + "".join(l + newline for l in context_lines) + "".join(
        lines[insert_at:]
    )
    try:
        migration = migrate_source(source.encode("utf-8"), options.target, options.ignored,
                                   helper_module=options.helper_module)
    except RecursionError:
        raise CellFailed(Code.INTERNAL_ERROR, "cell too deeply nested for the parser") from None
    except Exception as error:  # noqa: BLE001 - one bad cell must not stop the notebook
        last = traceback.extract_tb(error.__traceback__)[-1]
        raise CellFailed(Code.INTERNAL_ERROR,
                         f"{type(error).__name__}: {error} (at {last.name}:{last.lineno})")
    new = migration.source.decode("utf-8")
    if context_lines:
        new = _cut_context(new, context_lines)
    count = len(context_lines)
    findings = []
    for finding in migration.findings:
        line = finding.line - 1  # 0-based, in the source with the context
        if line < insert_at:
            findings.append(finding)
        elif line >= insert_at + count:
            findings.append(dataclasses.replace(finding, line=finding.line - count))
    return new, findings


def _context_lines(context: _Context, keep, tag: str, own_imports: set[str]) -> list[str]:
    """What the earlier cells put in the namespace, as code the cell can be migrated with.

    The imports sit in an `if` block: they bind module names before the cell's code uses them
    (libcst resolves a name only to bindings above it), yet they are not top-level imports, so
    the pipeline's import adder (transforms/imports.py) never merges a new import into them
    nor adds one after them.
    A function reads the names (a read inside a function sees every module binding): the
    earlier cells' names, so that a `P` bound there is known to be taken, and the names later
    cells still need, so that the pipeline keeps this cell's import of them. The helper stub is
    a top-level definition, which is what stops the helper from being inserted a second time.
    """
    imported = _bound_by_imports(ast.parse("\n".join(context.imports))) - own_imports
    reads = sorted(imported | set(keep) | set(context.names_taken))
    lines = [f"if {tag}_context__:", "    pass"]
    lines += ["    " + statement for statement in context.imports]
    if reads:
        lines += [f"    def {tag}_reads__():", f"        return ({', '.join(reads)},)"]
    for name in context.helpers_defined:  # marked as ours, so rules do not take it for the user's
        lines += [HELPER_MARKER, f"def {name}(*{tag}_stub__, **kwargs): ..."]
    return lines


def _cut_context(text: str, context_lines: list[str]) -> str:
    """Remove the context lines again: the `if` line, its indented body, the helper stubs."""
    head = context_lines[0]
    stubs = [line for line in context_lines[1:] if not line.startswith((" ", "\t"))]
    lines = [c + n for c, n in split(text)]
    starts = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == head]
    if len(starts) != 1:
        raise CellFailed(Code.INTERNAL_ERROR,
                         "the notebook context added to the cell was not found again")
    end = starts[0] + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t"):
        end += 1
    for stub in stubs:
        if end >= len(lines) or lines[end].rstrip("\r\n") != stub:
            raise CellFailed(Code.INTERNAL_ERROR,
                             "the notebook context added to the cell was changed")
        end += 1
    return "".join(lines[: starts[0]] + lines[end:])


def _imports_of(tree: ast.Module | None) -> list[str]:
    if tree is None:
        return []
    return [
        ast.unparse(s)
        for s in statements(tree.body)
        if isinstance(s, (ast.Import, ast.ImportFrom))
        and not (isinstance(s, ast.ImportFrom) and s.module == "__future__")
    ]


def _bound_by_imports(tree: ast.Module | None) -> set[str]:
    names: set[str] = set()
    for statement in statements(tree.body) if tree is not None else ():
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _helper_names_bound(tree: ast.Module | None, text: str) -> tuple[list[str], list[str]]:
    """The helper names (`_device_put_sharded`, `_device_put_sharded_2`, ...) a cell binds at
    top level: (the tool's helpers, under the marker comment; the cell's own functions)."""
    if tree is None:
        return [], []
    lines = text.splitlines()
    ours, theirs = [], []
    for statement in tree.body:
        targets = [statement] if isinstance(statement, ast.FunctionDef) else \
            statement.targets if isinstance(statement, ast.Assign) else []
        for target in targets:
            name = target.name if isinstance(target, ast.FunctionDef) else getattr(target, "id", "")
            if helper_base(name) is None:
                continue
            start = min([d.lineno for d in getattr(target, "decorator_list", ())]
                        + [statement.lineno])
            marked = isinstance(target, ast.FunctionDef) and 2 <= start <= len(lines) + 1 and \
                lines[start - 2].lstrip().startswith(HELPER_MARKER_WORD)
            (ours if marked else theirs).append(name)
    return ours, theirs


def _names(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


__all__ = ["NotebookMigration", "migrate_notebook"]
