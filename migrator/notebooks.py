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
  HELPER_NAMES) into a module that already defines it at top level. A stub is such a
  definition, so once a cell has received a helper, later cells are migrated without a copy.
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

IPython syntax is masked before parsing: each line magic, shell escape (`!cmd`, `x = !cmd`),
help line (`obj?`, `??obj`) or autocall escape (`/f x`) that starts a logical line (a small
scanner follows brackets, strings and backslash continuations) becomes a string statement
`"__pmap_migrate_nb_<k>__"` with the same indentation: valid Python in any block, and a header
statement like a docstring, so imports and the helper go after a leading `%%time` or
`!pip install`. The tag occurs nowhere in the cell. After migration every placeholder line is
put back exactly; one missing or doubled makes the cell fail safe (untouched, PM005). A cell
opened by a cell magic whose body is not Python (`%%bash`, `%%writefile`, ...) is not touched.

With `--style global` the Python cells are first read as one module by the global pass, and
cut back into cells before the above: see `_migrate_cells_global`.

The JSON is written back in the layout it was read in: the indent, separators, ASCII escaping,
line ends and surrounding whitespace are found by re-serialising the original and comparing,
keys keep their order, and only the `source` of changed cells differs (a list of lines as
nbformat writes them, or a string if it was one). A notebook in which no cell changed is
returned as the very bytes it came in as.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import traceback
import warnings

import libcst as cst
from libcst.metadata import PositionProvider

from migrator.options import MigrationOptions
from transforms.codes.findings import Finding
from transforms.pipeline import might_need_migration, migrate_source
from transforms.module_helpers import HELPER_NAMES
from transforms.helpers.placement_helpers import HELPER_MARKER

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
_COMPILE_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # IPython allows top-level await


class NotebookError(Exception):
    """The bytes are not a notebook this tool can read (invalid JSON, not nbformat 4)."""


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
    document = _Document.load(data)
    cells = document.code_cells()
    if options.style == "global" and "PM100" not in options.ignored:
        results = _migrate_cells_global(cells, options)
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


# -- the notebook file ----------------------------------------------------------------------


@dataclasses.dataclass
class _Cell:
    index: int  # among all cells
    text: str


class _Document:
    """The parsed JSON and how it was laid out, so it can be written back the same way."""

    def __init__(self, notebook: dict, prefix: str, core: str, suffix: str):
        self.notebook = notebook
        self.prefix, self.core, self.suffix = prefix, core, suffix  # whitespace, JSON, whitespace

    @classmethod
    def load(cls, data: bytes) -> _Document:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookError(f"not UTF-8 text: {error}") from None
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        text = text[len(bom):]
        try:
            notebook = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise NotebookError(f"not valid JSON: {error}") from None
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise NotebookError("not a Jupyter notebook: no list of cells")
        major = notebook.get("nbformat")
        if not isinstance(major, int) or major < 4:
            raise NotebookError(f"nbformat {major!r} is not supported (4 is); convert it with nbconvert")
        for index, cell in enumerate(notebook["cells"]):
            source = cell.get("source") if isinstance(cell, dict) else None
            if not isinstance(source, (str, list)) or (
                isinstance(source, list) and not all(isinstance(s, str) for s in source)
            ):
                raise NotebookError(f"cell {index}: not a cell with a text source")
        core = text.strip()
        prefix = bom + text[: len(text) - len(text.lstrip())]
        suffix = text[len(text.rstrip()):]
        return cls(notebook, prefix, core, suffix)

    def is_python(self) -> bool:
        metadata = self.notebook.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        info = metadata.get("language_info")
        spec = metadata.get("kernelspec")
        language = (info.get("name") if isinstance(info, dict) else None) or (
            spec.get("language") if isinstance(spec, dict) else None
        )
        return not isinstance(language, str) or language.lower().startswith(("python", "ipython"))

    def code_cells(self) -> list[_Cell]:
        if not self.is_python():
            return []
        return [
            _Cell(index, _join(cell["source"]))
            for index, cell in enumerate(self.notebook["cells"])
            if cell.get("cell_type") == "code"
        ]

    def set_source(self, index: int, text: str) -> None:
        cell = self.notebook["cells"][index]
        # nbformat writes a list of lines, each with its line end (str.splitlines(True)).
        cell["source"] = text.splitlines(True) if isinstance(cell["source"], list) else text

    def dump(self) -> bytes:
        layout = self._layout()
        return (self.prefix + _dumps(self.notebook, layout) + self.suffix).encode("utf-8")

    def _layout(self) -> tuple:
        """The json.dumps arguments that reproduce the original bytes, or nbformat's layout."""
        original = json.loads(self.core)  # a fresh copy: self.notebook has been edited
        newline = "\r\n" if "\r\n" in self.core else "\n"
        lines = self.core.split(newline)
        if len(lines) > 1:
            second = lines[1]
            indent = second[: len(second) - len(second.lstrip(" \t"))]
            separators = [(",", ": "), (", ", ": ")]
        else:
            indent = None
            separators = [(", ", ": "), (",", ":"), (",", ": "), (", ", ":")]
        for ensure_ascii in (False, True):
            for separator in separators:
                layout = (indent, separator, ensure_ascii, newline)
                if _dumps(original, layout) == self.core:
                    return layout
        return (indent, separators[0], False, newline)


def _dumps(value, layout: tuple) -> str:
    indent, separators, ensure_ascii, newline = layout
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ensure_ascii)
    return text.replace("\n", newline) if newline != "\n" else text  # JSON strings hold no raw newline


def _join(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


# -- IPython syntax -------------------------------------------------------------------------


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
class _Masked:
    """A cell as Python: IPython lines replaced by placeholder strings."""

    text: str
    originals: dict[str, str]  # placeholder line -> original line, both without line ends
    ipython: list[tuple[int, str]]  # (line number, original line) of every masked line
    line_count: int
    cell_magic: str | None = None


def _split(text: str) -> list[tuple[str, str]]:
    """Lines as Python sees them ('\\n', '\\r\\n' or '\\r'), each as (content, line end)."""
    lines = []
    for match in _LINE.finditer(text):
        if match.group(0) == "":
            break
        lines.append((match.group(1), match.group(2)))
    return lines


def _unique_tag(*texts: str) -> str:
    tag, number = "__pmap_migrate_nb", 0
    while any(tag in text for text in texts):
        number += 1
        tag = f"__pmap_migrate_nb{number}"
    return tag


def _mask(text: str, tag: str) -> _Masked | None:
    """None when the cell is run by a cell magic whose body is not Python."""
    lines = _split(text)
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
    return _Masked("".join(out), originals, ipython, len(lines), cell_magic)


def _unmask(text: str, masked: _Masked) -> str:
    out = []
    seen: set[str] = set()
    for content, newline in _split(text):
        if content in masked.originals:
            if content in seen:
                raise _CellFailed("PM005", "an IPython line placeholder was duplicated")
            seen.add(content)
            content = masked.originals[content]
        out.append(content + newline)
    if len(seen) != len(masked.originals):
        raise _CellFailed("PM005", "an IPython line placeholder was lost")
    return "".join(out)


# -- cells ------------------------------------------------------------------------------------


class _CellFailed(Exception):
    def __init__(self, code: str, message: str, line: int = 1, col: int = 1):
        super().__init__(message)
        self.code, self.message, self.line, self.col = code, message, line, col


@dataclasses.dataclass
class _CellResult:
    text: str
    findings: list[Finding]
    tree: ast.Module | None = None  # the migrated cell as Python, None when not Python
    original_tree: ast.Module | None = None
    masked: _Masked | None = None
    words: set[str] = dataclasses.field(default_factory=set)  # names this cell refers to


@dataclasses.dataclass
class _Context:
    imports: list[str]
    helpers_defined: tuple[str, ...]


def _migrate_cells(cells: list[_Cell], options: MigrationOptions) -> list[_CellResult]:
    imports: list[str] = []
    helpers_defined: tuple[str, ...] = ()
    contexts: list[_Context] = []
    results: list[_CellResult] = []
    for cell in cells:
        context = _Context(list(imports), helpers_defined)
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
        helpers_defined += tuple(
            name for name in _helpers_defined(result.tree) if name not in helpers_defined
        )

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


def _migrate_cell(text: str, context: _Context, options: MigrationOptions, keep) -> _CellResult:
    context_text = "\n".join(context.imports)
    tag = _unique_tag(text, context_text)
    masked = _mask(text, tag)
    if masked is None:  # a cell magic that is not Python
        return _CellResult(text, [], words=set(re.findall(r"\w+", text)))
    words = {w for _, line in masked.ipython for w in re.findall(r"\w+", line)}
    findings = _pmap_in_ipython_lines(masked)
    try:
        original_tree = _parse(masked.text)
    except SyntaxError as error:
        line = min(max(error.lineno or 1, 1), max(masked.line_count, 1))
        finding = Finding("PM001", line, (error.offset or 0) or 1, f"syntax error: {error.msg}")
        return _CellResult(text, [finding], words=set(re.findall(r"\w+", text)))
    except (ValueError, RecursionError) as error:
        finding = Finding("PM001", 1, 1, f"cannot parse: {error}")
        return _CellResult(text, [finding], words=set(re.findall(r"\w+", text)))
    result = _CellResult(text, findings, original_tree, original_tree, masked)
    result.words = words | _names(original_tree)
    if not might_need_migration(masked.text.encode("utf-8")):
        return result
    try:
        new_text, cell_findings = _run_pipeline(
            masked, context, options, keep, tag, _bound_by_imports(original_tree)
        )
        new_tree = _parse(new_text)
        restored = _unmask(new_text, masked)
    except _CellFailed as failed:
        result.findings = [Finding(failed.code, failed.line, failed.col, failed.message)]
        return result
    except SyntaxError as error:
        result.findings = [Finding("PM004", 1, 1, f"rewritten cell does not parse: {error}")]
        return result
    result.text = restored
    result.tree = new_tree
    result.words = words | _names(new_tree)
    result.findings = sorted(cell_findings + findings, key=lambda f: (f.line, f.col, f.code))
    return result


def _run_pipeline(
    masked: _Masked, context: _Context, options: MigrationOptions, keep, tag: str,
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
        raise _CellFailed("PM001", f"syntax error: {error.message}", line, error.raw_column + 1)
    except RecursionError:
        raise _CellFailed("PM005", "cell too deeply nested for the parser") from None
    statements = wrapper.module.body
    header = 0
    while header < len(statements) and _is_header_statement(statements[header]):
        header += 1
    lines = [c + n for c, n in _split(body)]
    context_lines: list[str] = []
    insert_at = len(lines)  # 0-based index of the first line of the first non-header statement
    if header < len(statements):
        first = statements[header]
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
        raise _CellFailed("PM005", "cell too deeply nested for the parser") from None
    except Exception as error:  # noqa: BLE001 - one bad cell must not stop the notebook
        last = traceback.extract_tb(error.__traceback__)[-1]
        raise _CellFailed("PM005", f"{type(error).__name__}: {error} (at {last.name}:{last.lineno})")
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
    reads = sorted(imported | set(keep))
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
    lines = [c + n for c, n in _split(text)]
    starts = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == head]
    if len(starts) != 1:
        raise _CellFailed("PM005", "the notebook context added to the cell was not found again")
    end = starts[0] + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t"):
        end += 1
    for stub in stubs:
        if end >= len(lines) or lines[end].rstrip("\r\n") != stub:
            raise _CellFailed("PM005", "the notebook context added to the cell was changed")
        end += 1
    return "".join(lines[: starts[0]] + lines[end:])


# -- --style global ---------------------------------------------------------------------------


class _GlobalUnavailable(Exception):
    """The global style cannot be applied to this notebook; `cell` / `line` say where."""

    def __init__(self, message: str, cell: int, line: int = 1, col: int = 1):
        super().__init__(message)
        self.message, self.cell, self.line, self.col = message, cell, line, col


def _migrate_cells_global(cells: list[_Cell], options: MigrationOptions) -> list[_CellResult]:
    """`--style global` over a notebook: the notebook's Python cells, in order, are one module.

    The global pass (transforms.global_view, through the same `migrate_global_then_faithful` a
    `.py` module goes through) sees that module whole, with a marker line between cells, so a
    step defined in one cell and called from a function of another is followed as in a `.py`
    file, and what it adds at module level (the imports, the one `_mesh` function) goes once
    into the first cell with code, after its imports. The module is then cut at the markers and
    what the global pass left goes through the faithful cell-by-cell migration above (each
    helper once, in the first cell that needs it). Findings of both passes go back to their
    cell and line.

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
        return _migrate_cells(cells, options)
    tag = _unique_tag(*(cell.text for cell in cells))
    masks = [_mask(cell.text, tag) for cell in cells]
    try:
        module, spans, added_newline = _one_module(cells, masks, tag)
    except _GlobalUnavailable as unavailable:
        return _faithful_instead(cells, options, unavailable)
    state: dict[str, list[_CellResult]] = {}

    def faithful(source: bytes, target, ignored) -> MigrationResult:
        """The faithful pass over what the global pass left, cell by cell; its findings at
        their lines in `source`."""
        texts, starts = _cut_cells(source.decode("utf-8"), tag, cells, masks, spans, added_newline)
        state["texts"] = texts
        edited = [_Cell(cell.index, text) for cell, text in zip(cells, texts)]
        results = _migrate_cells(edited, options)
        state["results"] = results
        findings = [dataclasses.replace(f, line=f.line + starts[k] - 1)
                    for k, result in enumerate(results) if k in starts for f in result.findings]
        return MigrationResult(source=source, findings=findings, _original=source)

    try:
        merged = migrate_global_then_faithful(module.encode("utf-8"), options.target,
                                              options.ignored, faithful)
        if any(f.code == GLOBAL_SITE for f in merged.findings):
            # Values change layout only at global sites (pmap's contract, PM612, keeps them).
            _check_global_edits(cells, masks, state["texts"])
    except _GlobalUnavailable as unavailable:
        return _faithful_instead(cells, options, unavailable)
    results = state["results"]
    for result in results:
        result.findings = []
    for finding in merged.findings:
        k, line = _cell_of(finding.line, spans)
        message = finding.message
        if finding.code.startswith("PM6"):  # the global pass names module lines: name cells
            message = re.sub(r"\bline (\d+)\b", lambda m: "cell {}, line {}".format(
                cells[_cell_of(int(m[1]), spans)[0]].index, _cell_of(int(m[1]), spans)[1]), message)
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
            _parse(masked.text)
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
        spans[k] = (line, len(_split(text)))
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
    for number, (content, newline) in enumerate(_split(text), start=1):
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
            texts.append(_unmask(piece, masks[k]))
        except _CellFailed:
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

    before = [c + n for c, n in _split(original)]
    lead = max(0, blank_run(lines) - blank_run(before))
    lines = lines[lead:]
    trail = max(0, blank_run(reversed(lines)) - blank_run(reversed(before)))
    return lead, lines[: len(lines) - trail] if trail else lines


def _check_global_edits(cells, masks, texts: list[str]) -> None:
    """Refuse what the global pass cannot see in a notebook (see `_migrate_cells_global`)."""
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
    for statement in _statements(tree.body):
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


def _faithful_instead(cells, options, unavailable: _GlobalUnavailable) -> list[_CellResult]:
    results = _migrate_cells(cells, options)
    finding = Finding("PM607", unavailable.line, unavailable.col, unavailable.message)
    results[unavailable.cell].findings = sorted(
        [*results[unavailable.cell].findings, finding], key=lambda f: (f.line, f.col, f.code))
    return results


def _is_header_statement(statement: cst.CSTNode) -> bool:
    """Imports and strings, as transforms.faithful.pmap_sites counts a module's header."""
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom))
        or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString)))
        for s in statement.body
    )


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():  # e.g. invalid escape sequences: not ours to report
        warnings.simplefilter("ignore")
        return compile(text, "<cell>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True)


def _pmap_in_ipython_lines(masked: _Masked) -> list[Finding]:
    """pmap in a `%time`-like line runs as Python but is kept byte for byte: say so."""
    findings = []
    for number, line in masked.ipython:
        magic = re.match(r"[ \t]*(?:[\w.,\s]+=[ \t]*)?%{1,2}(\w+)", line)
        if not magic or magic.group(1) not in PYTHON_LINE_MAGICS | PYTHON_CELL_MAGICS:
            continue
        for word in _PMAP_WORD.finditer(line):
            findings.append(Finding(
                "PM205", number, word.start() + 1,
                f"pmap in the IPython line `{line.strip()}` is not migrated (magic lines are "
                "kept byte for byte); move the code out of the magic",
            ))
            break
    return findings


def _statements(body: list[ast.stmt]):
    """Statements that run in the cell's namespace: compound bodies, not functions or classes."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(statement, field, []) or [])
        for handler in getattr(statement, "handlers", []) or []:
            yield from _statements(handler.body)
        for case in getattr(statement, "cases", []) or []:
            yield from _statements(case.body)


def _imports_of(tree: ast.Module | None) -> list[str]:
    if tree is None:
        return []
    return [
        ast.unparse(s)
        for s in _statements(tree.body)
        if isinstance(s, (ast.Import, ast.ImportFrom))
        and not (isinstance(s, ast.ImportFrom) and s.module == "__future__")
    ]


def _bound_by_imports(tree: ast.Module | None) -> set[str]:
    names: set[str] = set()
    for statement in _statements(tree.body) if tree is not None else ():
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _helpers_defined(tree: ast.Module | None) -> list[str]:
    if tree is None:
        return []
    return [s.name for s in tree.body if isinstance(s, ast.FunctionDef) and s.name in HELPER_NAMES]


def _names(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


__all__ = ["NotebookError", "NotebookMigration", "migrate_notebook"]
