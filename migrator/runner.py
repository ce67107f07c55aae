"""Per-file pipeline: read, check it is text, migrate, re-parse, and say what happened.

Nothing here writes user files except `write_result`, and it writes only parsed, changed
output atomically. A file that fails at any step gets one error finding and the run goes on.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import functools
import shutil
import traceback
from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from migrator.config import Config
from migrator.files import SourceFile, discover
from migrator.notebooks import NotebookError, migrate_notebook
from migrator.textio import NotText, atomic_write, check_text
from transforms.findings import Finding
from transforms.pipeline import might_need_migration, migrate_source
from transforms.rules import all_rules
from transforms.target import TargetJax


@dataclasses.dataclass
class FileResult:
    file: SourceFile
    original: bytes = b""
    migrated: bytes = b""
    encoding: str = "utf-8"
    findings: list[Finding] = dataclasses.field(default_factory=list)
    was_changed: bool = False  # kept by slim() once the contents are dropped
    layouts: tuple = ()  # --style global: how the changed functions' outputs changed layout

    @property
    def changed(self) -> bool:
        return self.was_changed or (self.migrated != self.original and not self.has_error)

    def slim(self) -> FileResult:
        """The same result without the file contents, so a long run keeps only findings."""
        return dataclasses.replace(self, original=b"", migrated=b"", was_changed=self.changed)

    @property
    def has_error(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def fail(self, code: str, message: str, line: int = 1, col: int = 1) -> FileResult:
        self.findings.append(Finding(code, line, col, message, self.file.display))
        self.migrated = self.original
        return self


def process(
    file: SourceFile, target: TargetJax, config: Config | None = None, style: str | None = None
) -> FileResult:
    """Migrate one file; with a configuration, its per-path target, codes and style apply
    (`style` given here wins)."""
    ignored: frozenset[str] = frozenset()
    if config is not None:
        target = TargetJax.parse(config.target_for(file.path))
        ignored = frozenset(c for c in all_rules() if not config.keeps(file.path, c))
    style = style or (config.style if config is not None else "faithful")
    result = _process(file, target, ignored, style)
    if ignored:
        result.findings = [f for f in result.findings if f.code not in ignored]
    return result


def _process(
    file: SourceFile, target: TargetJax, ignored: frozenset[str], style: str = "faithful"
) -> FileResult:
    result = FileResult(file=file)
    if file.problem:
        result.findings.append(file.problem)
        return result
    try:
        result.original = result.migrated = file.path.read_bytes()
    except OSError as error:
        return result.fail("PM003", f"cannot read: {error.strerror or error}")
    if file.path.suffix == ".ipynb":
        return _process_notebook(result, target)
    try:
        result.encoding = check_text(result.original)
    except NotText as error:
        return result.fail("PM002", str(error), error.line)
    if not might_need_migration(result.original):
        # No site can be in this file. Its syntax is a linter's business: parsing every
        # skipped file took half of a whole-tree run.
        return result
    try:
        migration = migrate_source(result.original, target, ignored, style)
    except cst.ParserSyntaxError as error:
        _check_syntax(result)  # Python's own message and position are the clearer ones
        if not result.has_error:
            result.fail("PM001", f"syntax error: {error.message}", error.raw_line, error.raw_column + 1)
        return result
    except RecursionError:
        return result.fail("PM005", "file too deeply nested for the parser")
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        last = traceback.extract_tb(error.__traceback__)[-1]
        return result.fail("PM005", f"{type(error).__name__}: {error} (at {last.name}:{last.lineno})")
    result.findings.extend(f.at(file.display) for f in migration.findings)
    if migration.source != result.original:
        problem = _does_not_parse(result.original, migration.source)
        if problem:
            return result.fail("PM004", f"rewritten code does not parse: {problem}")
    result.migrated = migration.source
    result.layouts = migration.layouts
    return result


def _process_notebook(result: FileResult, target: TargetJax) -> FileResult:
    try:
        migration = migrate_notebook(result.original, target)
    except NotebookError as error:
        return result.fail("PM002", f"not a notebook: {error}")
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        return result.fail("PM005", f"{type(error).__name__}: {error}")
    result.findings.extend(
        dataclasses.replace(f, path=result.file.display, cell=cell)
        for f, cell in zip(migration.findings, migration.cell_of)
    )
    result.migrated = migration.source
    return result


def _does_not_parse(original: bytes, migrated: bytes) -> str | None:
    """Why the rewritten code does not parse, or None. Python's own parser decides (a tenth of
    libcst's cost); for code in a grammar newer than this interpreter, libcst does."""
    try:
        ast.parse(migrated)
        return None
    except SyntaxError as error:
        try:
            ast.parse(original)
        except SyntaxError:
            pass
        else:
            return f"{error.msg} (line {error.lineno})"
    except (ValueError, RecursionError) as error:
        return str(error)
    try:
        cst.parse_module(migrated)
        return None
    except Exception as error:  # noqa: BLE001 - any failure is the finding
        return str(error)


def _check_syntax(result: FileResult) -> None:
    """Python's own message and position for a file libcst could not parse."""
    try:
        ast.parse(result.original, filename=result.file.display)
    except SyntaxError as error:
        result.fail("PM001", f"syntax error: {error.msg}", error.lineno or 1, (error.offset or 0) or 1)
    except (ValueError, RecursionError) as error:
        result.fail("PM001", f"cannot parse: {error}")


def process_all(
    paths: list[Path], target: TargetJax, jobs: int = 1, config: Config | None = None,
    style: str | None = None,
) -> Iterator[FileResult]:
    return process_files(discover(paths, config), target, jobs, config, style)


def process_files(
    files, target: TargetJax, jobs: int = 1, config: Config | None = None,
    style: str | None = None,
) -> Iterator[FileResult]:
    """Results in discovery order whatever `jobs` is; unchanged files come back slim."""
    work = functools.partial(_process_in_worker, target=target, config=config, style=style)
    if jobs <= 1:
        yield from map(work, files)
        return
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(work, files, chunksize=16)


def _process_in_worker(
    file: SourceFile, target: TargetJax, config: Config | None, style: str | None = None
) -> FileResult:
    return _for_caller(process(file, target, config, style))


def _for_caller(result: FileResult) -> FileResult:
    """Contents travel back only when a diff or a write needs them."""
    return result if result.changed else result.slim()


def write_result(result: FileResult, out_dir: Path | None) -> None:
    """Write a changed file in place (or its migrated copy under out_dir); errors -> findings."""
    try:
        if out_dir is None:
            if result.changed:
                atomic_write(result.file.path, result.migrated, expected_original=result.original)
            return
        destination = out_dir / result.file.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if result.changed:
            atomic_write(destination, result.migrated)
            shutil.copymode(result.file.path, destination)
        elif result.file.problem is None and result.file.path.is_file():
            shutil.copy2(result.file.path, destination)
    except OSError as error:
        result.fail("PM006", f"not written: {error}")


def copy_other_files(roots: list[Path], out_dir: Path) -> None:
    """--out-dir gets every non-Python file of the given directories too, unchanged."""
    from migrator.files import SKIPPED_DIRS

    for root in roots:
        root = Path(root).absolute()
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part in SKIPPED_DIRS for part in rel.parts) or path.suffix == ".py":
                continue
            if path.is_file() and not path.is_symlink():
                (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out_dir / rel)
