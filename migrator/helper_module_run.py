"""The `--helper-module` of a diff or apply run: resolved before anything is processed, its
new text made from what the migrated files import from it, and written (atomically) before
the files that import it. Each problem is told to the user and ends the run with exit 2
before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from migrator import report
from migrator.files import SourceFile, display_name
from migrator.helper_module import HelperModule, HelperModuleError, written_text
from migrator.options import MigrationOptions
from migrator.runner import FileResult, protected_finding, refused_as_protected
from migrator.textio import atomic_write
from transforms.target import TargetJax


def helper_module_for_run(paths: list[Path], options: MigrationOptions) -> HelperModule | None:
    """The --helper-module (or config helper-module) of this run, checked; exit 2 if unusable."""
    if options.helper_module is None:
        return None
    try:
        return HelperModule.resolve(options.helper_module, paths, options.config)
    except HelperModuleError as error:
        typer.echo(f"pmap-migrate: --helper-module {error}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None


def shared_helpers(
    helper: HelperModule, results: list[FileResult], options: MigrationOptions
) -> tuple[bytes, bytes | None]:
    """The helper module's current and new bytes (None: unchanged) for what `results`
    import from it. Exit 2, before anything is written, when a file could not import it or
    two files need one helper written for different targets."""
    needed: dict[str, TargetJax] = {}
    texts: dict[str, str] = {}
    problems = []
    for result in results:
        names = helper.imported_names(result.migrated) if result.changed else set()
        if not names:
            continue
        why = helper.cannot_import(result.file.path)
        if why:
            problems.append(f"{result.file.display}: {why}")
            continue
        target = options.for_file(result.file.path).target
        for name in sorted(names):
            if texts.setdefault(name, written_text(name, target)) != written_text(name, target):
                problems.append(
                    f"{result.file.display}: needs {name} written for jax {target}, and another "
                    f"file for jax {needed[name]}; one helper module holds one text per helper"
                )
            needed.setdefault(name, target)
    try:
        shared = helper.updated_text(needed)
    except HelperModuleError as error:
        problems.append(str(error))
    if problems:
        for problem in problems:
            typer.echo(f"pmap-migrate: --helper-module {helper.name}: {problem}", err=True)
        typer.echo("pmap-migrate: nothing written", err=True)
        raise typer.Exit(report.EXIT_ERROR)
    return shared


def write_helper_module(
    helper: HelperModule, shared: tuple[bytes, bytes | None], paths: list[Path],
    out_dir: Path | None, results: list[FileResult],
) -> None:
    """Create or update the helper module (atomically), before the files that import it.

    A write-protected module (read-only, or not this user's; under out_dir, a destination
    that exists so with other contents) is neither replaced nor chmod-ed: it gets PM008, as
    any file apply leaves alone, and so does each file of `results` that imports a helper it
    does not define yet, which keeps its original instead of importing a missing name. The
    module's PM008 goes on its own result in `results`, or on a new one appended there."""
    current, new = shared
    if new is None:
        return
    destination = helper.path
    if out_dir is not None:
        root = next(Path(os.path.abspath(p)) for p in paths
                    if helper.path.is_relative_to(Path(os.path.abspath(p))))
        destination = out_dir / helper.path.relative_to(root)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if destination.is_file() and destination.read_bytes() == new:
            return
    module = next((r for r in results if r.file.path == helper.path), None)
    if module is None:
        module = FileResult(SourceFile(helper.path, helper.path.parent, display_name(helper.path)))
    if refused_as_protected(module, destination):
        if module not in results:
            results.append(module)
        # (the module the files will import: under out_dir, the copy there)
        _hold_back_importers(helper, destination.read_bytes(), results, display_name(destination))
        return
    try:
        atomic_write(destination, new, expected_original=current if out_dir is None else None)
    except OSError as error:
        typer.echo(f"pmap-migrate: {display_name(destination)}: not written: {error}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None
    verb = "updated" if current else "created"
    typer.echo(f"{display_name(destination)}: helper module {helper.name} {verb}", err=True)


def _hold_back_importers(helper: HelperModule, current: bytes, results: list[FileResult],
                         shown: str) -> None:
    """PM008 for each changed file that imports a helper the unwritten module lacks."""
    try:
        defined = helper.defined_names(current)
    except (HelperModuleError, UnicodeDecodeError):  # not Python: it defines nothing usable
        defined = set()
    for result in results:
        if not result.changed:
            continue
        missing = sorted(helper.imported_names(result.migrated) - defined)
        if missing:
            result.findings.append(protected_finding(
                f"not written: it would import {', '.join(missing)} from {helper.name}, whose "
                f"file {shown} is write-protected and was not written", result.file.display))
            result.migrated = result.original
