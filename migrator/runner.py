"""Per-file pipeline: read, check it is text, migrate, re-parse, and say what happened.

Nothing here writes user files except `write_result`, and it writes only parsed, changed
output atomically. A file that fails at any step gets one error finding and the run goes on.

libcst and the rules are imported on the first file that refers to a pmap-era API
(transforms/reading/prefilter.py decides that without them): importing them costs more than scanning
a whole tree without references.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import functools
import gc
import os
import shutil
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

from migrator.files import SourceFile, display_name
from migrator.interrupts import init_worker, stop_workers
from migrator.options import MigrationOptions
from migrator.tree_index import tree_contexts
from migrator.textio import NotText, atomic_write, check_text, write_protection
from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.contract_names import is_fully_global
from transforms.reading.prefilter import might_need_migration, parse_or_none, referenced_rules
from transforms.todo_comments import TODO_WORD
from transforms.tree_uses import NO_TREE, TreeContext


# A pmap site rewritten: in the faithful style (PM100), in the global style (PM600), or
# given pmap's calling contract without the helper (PM612).
MIGRATED_SITE_CODES = (Code.PMAP_MIGRATED, Code.GLOBAL_VIEW_SITE, Code.GLOBAL_VIEW_CONTRACT)


@dataclasses.dataclass
class FileResult:
    file: SourceFile
    original: bytes = b""
    migrated: bytes = b""
    encoding: str = "utf-8"
    findings: list[Finding] = dataclasses.field(default_factory=list)
    was_changed: bool = False  # kept by slim() once the contents are dropped
    layouts: tuple = ()  # --style global: how the changed functions' outputs changed layout
    # For a migrated file (see process): whether its output holds no pmap-contract code
    # (transforms/contract_names.py); None for any other file.
    fully_global: bool | None = None

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


def process(file: SourceFile, options: MigrationOptions,
            tree: TreeContext = NO_TREE) -> FileResult:
    """Migrate one file with the options that apply at its path (`MigrationOptions.for_file`).
    `tree`: what the other files of the run tell about it (migrator/tree_index.py)."""
    options = options.for_file(file.path)
    result = _process(file, options, tree)
    if options.ignored:
        result.findings = [f for f in result.findings if f.code not in options.ignored]
    if result.changed:
        # A migrated file: one with a pmap site rewritten, or pmap-contract code in its output
        # (a placement helper); not a file changed only for another API (jax.tree_map).
        clean = is_fully_global(_migrated_code(result))
        if not clean or any(f.code in MIGRATED_SITE_CODES for f in result.findings):
            result.fully_global = clean
    return result


def _migrated_code(result: FileResult) -> str:
    """The migrated Python: the file's text, or a notebook's code cells one after another."""
    text = result.migrated.decode(result.encoding, "replace")
    if result.file.path.suffix != ".ipynb":
        return text
    import json

    cells = json.loads(text.lstrip("\ufeff")).get("cells", [])
    return "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")


def _process(file: SourceFile, options: MigrationOptions, tree: TreeContext) -> FileResult:
    result = FileResult(file=file)
    if file.problem:
        result.findings.append(file.problem)
        return result
    try:
        result.original = result.migrated = file.path.read_bytes()
    except OSError as error:
        return result.fail(Code.UNREADABLE, f"cannot read: {error.strerror or error}")
    if file.path.suffix == ".ipynb":
        return _process_notebook(result, options)
    try:
        result.encoding = check_text(result.original)
    except NotText as error:
        return result.fail(Code.NOT_TEXT, str(error), error.line)
    todo = TODO_WORD in result.original  # an earlier run's advice, reported until removed
    # A module of a cross-module group may call another module's steps with no pmap word
    # of its own (transforms/global_view/cross_module.py): its callers' edits are its own.
    grouped = tree.group is not None
    if not todo and not grouped and not might_need_migration(result.original):
        # No site can be in this file. Its syntax is a linter's business: parsing every
        # skipped file took half of a whole-tree run.
        return result
    syntax_tree = parse_or_none(result.original)
    rule_names = referenced_rules(result.original, syntax_tree)
    if not rule_names and not todo and not grouped:
        return result  # words in docstrings, comments or identifiers only
    import libcst as cst

    from transforms.pipeline import migrate_source

    try:
        # Decided above: no second look at the references.
        migration = migrate_source(result.original, options.target, options.ignored,
                                   syntax_tree=syntax_tree, helper_module=options.helper_module,
                                   style=options.style, rule_names=rule_names,
                                   tree=tree)
    except cst.ParserSyntaxError as error:
        _check_syntax(result)  # Python's own message and position are the clearer ones
        if not result.has_error:
            result.fail(Code.SYNTAX_ERROR,
                        f"syntax error: {error.message}", error.raw_line, error.raw_column + 1)
        return result
    except RecursionError:
        return result.fail(Code.INTERNAL_ERROR, "file too deeply nested for the parser")
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        last = traceback.extract_tb(error.__traceback__)[-1]
        return result.fail(Code.INTERNAL_ERROR,
                           f"{type(error).__name__}: {error} (at {last.name}:{last.lineno})")
    result.findings.extend(f.at(file.display) for f in migration.findings)
    if migration.source != result.original:
        problem = _does_not_parse(result.original, migration.source)
        if problem:
            return result.fail(Code.OUTPUT_DOES_NOT_PARSE,
                               f"rewritten code does not parse: {problem}")
    result.migrated = migration.source
    result.layouts = migration.layouts
    return result


def _process_notebook(result: FileResult, options: MigrationOptions) -> FileResult:
    from migrator.notebook_json import NotebookError
    from migrator.notebooks import migrate_notebook

    try:
        migration = migrate_notebook(result.original, options)
    except NotebookError as error:
        return result.fail(Code.NOT_TEXT, f"not a notebook: {error}")
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        return result.fail(Code.INTERNAL_ERROR, f"{type(error).__name__}: {error}")
    result.findings.extend(
        dataclasses.replace(f, path=result.file.display, cell=cell + 1)  # numbered from 1, as README
        for f, cell in zip(migration.findings, migration.cell_of)
    )
    result.migrated = migration.source
    return result


def _does_not_parse(original: bytes, migrated: bytes) -> str | None:
    """Why the rewritten code does not parse, or None. Python's own parser decides (a tenth of
    libcst's cost); for code in a grammar newer than this interpreter, libcst does."""
    try:
        # Code that compiles parses; compiling skips building Python's ast objects, which is
        # most of what ast.parse costs. What does not compile is looked at again below (the
        # compiler also refuses some code that parses, like `return` outside a function).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings are not ours to print
            compile(migrated, "<migrated>", "exec", dont_inherit=True)
        return None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
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
    import libcst as cst

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
        result.fail(Code.SYNTAX_ERROR,
                    f"syntax error: {error.msg}", error.lineno or 1, (error.offset or 0) or 1)
    except (ValueError, RecursionError) as error:
        result.fail(Code.SYNTAX_ERROR, f"cannot parse: {error}")


def process_all(paths: list[Path], options: MigrationOptions, jobs: int = 1) -> Iterator[FileResult]:
    return process_files(options.discover(paths), options, jobs)


def process_files(files, options: MigrationOptions, jobs: int = 1) -> Iterator[FileResult]:
    """Results in discovery order whatever `jobs` is; unchanged files come back slim. In the
    global style the files are one program: a module-level name another file uses keeps
    the contract its users rely on (migrator/tree_index.py)."""
    files = list(files)
    trees = tree_contexts(files) if options.style == "global" else {}
    work = functools.partial(_process_in_worker, options=options, trees=trees)
    if jobs <= 1:
        yield from map(work, files)
        return
    if _most_need_the_rules(files):
        # Imported and warmed once here, so the workers are forked with it, instead of once
        # in each.
        from transforms.pipeline import warm_up

        warm_up()
    # What exists now (modules, those caches) is never garbage: the workers' collections
    # skip it, and do not touch (and so copy) the pages they share with this process.
    gc.freeze()
    # Chunks of up to 16 files keep the messages few; on a small tree, smaller chunks keep
    # every worker busy to the end (a chunk is at most a sixteenth of a worker's share: with
    # a quarter, one worker could sit idle for a quarter of the run).
    chunksize = max(1, min(16, len(files) // (16 * jobs)))
    # The workers die with this process, even by SIGKILL (init_worker); when the run stops
    # early (an interrupt, an error, a consumer that closes this generator) they are killed
    # at once instead of finishing the chunks already queued to them.
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, initializer=init_worker, initargs=(os.getpid(),),
    )
    try:
        yield from pool.map(work, files, chunksize=chunksize)
    except BaseException:
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def tune_gc() -> None:
    """Collect the young generation every 50,000 allocations instead of 700: a libcst tree
    is ~100,000 objects, nearly none of them in a cycle, and the default made the collector
    scan each file's tree many times over (about a tenth of the time of a file with a site).
    For a command-line run (workers inherit it); memory stays bounded per file."""
    gc.set_threshold(50_000, 10, 10)


def _most_need_the_rules(files: list[SourceFile], sample_size: int = 64) -> bool:
    """Whether a quarter or more of a sample of the files, spread over the list, contain one of
    the rules' words. Only decides where libcst is imported: never what a file gets."""
    sample = files[:: max(1, len(files) // sample_size)]
    hits = 0
    for file in sample:
        try:
            hits += file.problem is None and might_need_migration(file.path.read_bytes())
        except OSError:
            pass
    return bool(sample) and 4 * hits >= len(sample)


def _process_in_worker(file: SourceFile, options: MigrationOptions,
                       trees: Mapping[Path, TreeContext] | None = None) -> FileResult:
    return _for_caller(process(file, options, (trees or {}).get(file.path, NO_TREE)))


def _for_caller(result: FileResult) -> FileResult:
    """Contents travel back only when a diff or a write needs them."""
    return result if result.changed else result.slim()


def write_result(result: FileResult, out_dir: Path | None) -> None:
    """Write a changed file in place (or its migrated copy under out_dir); errors -> findings.

    A write-protected file (read-only, or not this user's to write) is never replaced: it
    gets PM008 and keeps its bytes. Under out_dir that holds for a destination that already
    exists write-protected with other contents (a second run over the same copy, whose
    files kept a read-only source's mode, has nothing to write and says nothing)."""
    try:
        if out_dir is None:
            if result.changed and not refused_as_protected(result, result.file.path):
                atomic_write(result.file.path, result.migrated, expected_original=result.original)
            return
        destination = out_dir / result.file.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if result.changed:
            if _same_bytes(destination, result.migrated) or refused_as_protected(result, destination):
                return
            atomic_write(destination, result.migrated)
            shutil.copymode(result.file.path, destination)
        elif result.file.problem is None and result.file.path.is_file():
            if _same_bytes(destination, result.file.path.read_bytes()):
                return
            if not refused_as_protected(result, destination):
                shutil.copy2(result.file.path, destination)
    except OSError as error:
        result.fail(Code.WRITE_FAILED, f"not written: {error}")


def refused_as_protected(result: FileResult, path: Path) -> bool:
    """Whether `path` is write-protected; if so the result gets PM008 and keeps its original."""
    why = write_protection(path)
    if why is None:
        return False
    where = "" if path == result.file.path else f" {display_name(path)}"
    finding = protected_finding(f"not written:{where} {why}", result.file.display)
    if finding not in result.findings:  # (the helper module's result is refused before it is written)
        result.findings.append(finding)
    result.migrated = result.original
    return True


def protected_finding(why: str, display: str) -> Finding:
    """PM008 for `display`: `why` it was not written, and what the user does about it."""
    return Finding(Code.WRITE_PROTECTED, 1, 1, f"{why}; open it for edit (p4 edit, chmod u+w) and run "
                   "apply again", display)


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def copy_other_files(roots: list[Path], out_dir: Path, options: MigrationOptions
                     ) -> list[FileResult]:
    """--out-dir gets every file of the given directories that discovery does not take
    (non-Python files, and .py files excluded or gitignored), unchanged. A destination that
    already holds the same bytes is left as it is; one that is write-protected with other
    contents is neither replaced nor chmod-ed: its file comes back with PM008, as in
    `write_result`."""
    from migrator.files import SKIPPED_DIRS, SourceFile

    taken = {f.path.resolve() for f in options.discover(roots) if f.path.suffix == ".py"}
    refused = []
    for root in roots:
        root = Path(root).absolute()
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part in SKIPPED_DIRS for part in rel.parts) or path.resolve() in taken:
                continue
            if path.is_file() and not path.is_symlink():
                destination = out_dir / rel
                destination.parent.mkdir(parents=True, exist_ok=True)
                if _same_bytes(destination, path.read_bytes()):
                    continue
                result = FileResult(SourceFile(path, root, display_name(path)))
                if refused_as_protected(result, destination):
                    refused.append(result)
                else:
                    shutil.copy2(path, destination)
    return refused
