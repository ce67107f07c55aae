"""`pmap-migrate check`: its arguments checked, the migrated side made (a temporary copy when
only ORIGINAL is given) with the layout map of its migration, and the runs of
equivalence/check.py reported. The Typer command in cli.py only declares the options."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import typer

from migrator.options import MigrationOptions
from migrator.runner import copy_other_files, process_all, write_result


def run_check(paths: list[Path], entry: list[str], function: str | None, inputs: str | None,
              max_examples: int, devices: str, processes: int, reference_python: str | None,
              report_json: Path | None, junit: Path | None, timeout: float, rng_compat: bool,
              repeat: int, migration: MigrationOptions, platform: str = "cpu") -> int:
    """The check command's exit code; a bad argument raises typer.BadParameter."""
    from rich.console import Console

    from equivalence import reports as check_reports
    from equivalence.check import CheckOptions, exit_code
    from equivalence.check import check as run_entries
    from equivalence.notebook_entry import is_notebook_entry, notebook_path

    if len(paths) not in (1, 2):
        raise typer.BadParameter("give ORIGINAL MIGRATED, or a single ORIGINAL", param_hint="PATHS")
    for path in paths:
        if not path.exists():
            raise typer.BadParameter(f"{path} does not exist", param_hint="PATHS")
    if not entry and not function:
        raise typer.BadParameter(
            "give --entry MODULE:FUNCTION (or --function with --inputs)", param_hint="--entry"
        )
    if bool(function) != bool(inputs):
        raise typer.BadParameter("--function and --inputs go together", param_hint="--function")
    for name in [*entry, *(x for x in (function, inputs) if x)]:
        if ":" not in name and not (name in entry and is_notebook_entry(name)):
            raise typer.BadParameter(f"{name!r} is not MODULE:FUNCTION or NOTEBOOK.ipynb[:NAME]",
                                     param_hint="--entry")
    for name in entry:
        notebook = Path(_as_root(paths[0])) / notebook_path(name)
        if is_notebook_entry(name) and not notebook.is_file():
            raise typer.BadParameter(f"{notebook} is not a file", param_hint="--entry")
    try:
        counts = tuple(int(d) for d in devices.split(",") if d.strip())
    except ValueError:
        raise typer.BadParameter(f"{devices!r} is not a list of numbers", param_hint="--devices") from None
    if not counts or min(counts) < 1:
        raise typer.BadParameter("device counts must be positive", param_hint="--devices")
    if any(count % processes for count in counts):
        raise typer.BadParameter(
            f"every device count must be a multiple of --processes {processes}",
            param_hint="--devices")
    if processes > 1 and function:
        raise typer.BadParameter("property mode runs one process", param_hint="--processes")
    if platform != "cpu" and (processes > 1 or function):
        raise typer.BadParameter("an accelerator runs entries in one process, not property "
                                 "mode or --processes", param_hint="--platform")
    for report, flag in ((report_json, "--report-json"), (junit, "--junit")):
        # Settled before any program runs: a report that cannot be written after minutes of
        # runs would lose them all.
        if report is not None:
            try:
                report.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise typer.BadParameter(f"cannot write {report}: {error}",
                                         param_hint=flag) from None
    # Built once, from the original's project. The migrated copy carries its own helpers: a
    # helper module is written by `apply`, never into check's temporary copy.
    migration = dataclasses.replace(migration, helper_module=None)
    options = CheckOptions(devices=counts, timeout=timeout, rng_compat=rng_compat,
                           processes=processes, repeat=repeat, platform=platform,
                           jobs=1 if platform != "cpu" else CheckOptions.jobs)  # one accelerator
    if reference_python:
        # Workers run with the program's folder as working directory: resolve the path here.
        options.reference_python = (
            os.path.abspath(reference_python) if os.sep in reference_python else reference_python
        )
    roots = [_as_root(p) for p in paths]
    console = Console(width=None if sys.stdout.isatty() else 160)
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-check-") as scratch:
        layouts = {}
        if len(roots) == 1:
            entry_modules = {name.partition(":")[0] for name in [*entry, function] if name}
            layouts = _migrate_copy(roots[0], Path(scratch) / "migrated", migration,
                                    entry_modules)
            roots.append(Path(scratch) / "migrated")
        elif migration.style == "global":  # MIGRATED given: the layout map of migrating ORIGINAL
            layouts = _entry_layouts(process_all([roots[0]], migration), roots[0])
        if migration.style == "global":
            options.layouts = layouts
        if function:
            from equivalence.properties_cli import run_properties

            return run_properties(
                roots[0], roots[1], function, inputs, options, max_examples, console, report_json
            )
        found = []
        for result in run_entries(roots[0], roots[1], list(entry), options):
            found.append(result)
            console.print(
                f"{result.entry} {result.where}: {result.verdict} ({result.seconds:.1f} s)",
                highlight=False,
            )
    check_reports.print_terminal(found, console)
    if report_json:
        check_reports.write_json(found, report_json)
    if junit:
        check_reports.write_junit(found, junit)
    return exit_code(found)


def _migrate_copy(root: Path, destination: Path, options: MigrationOptions,
                  entry_modules: set[str]) -> dict:
    """The single-path form of check: migrate a temporary copy of the whole tree (an entry
    imports its neighbours), and say what the migration could not do in the entries' own
    modules; the rest of the tree is `scan`'s business, not this check's.
    Returns the migration's layout map (`_entry_layouts`)."""
    copy_other_files([root], destination, options)

    def written(results):
        for result in results:
            write_result(result, destination)
            if _module_of(result, root) in entry_modules:
                for finding in result.findings:
                    if finding.severity != "info":
                        typer.echo(finding.to_text(), err=True)
            yield result

    return _entry_layouts(written(process_all([root], options)), root)


def _entry_layouts(results, root: Path) -> dict:
    """entry "module:function" -> its output layouts (transforms/global_view/layout.py), from
    the `FileResult.layouts` of a migration of the tree at `root`."""
    found = {}
    for result in results:
        module = _module_of(result, root)
        for function in result.layouts if module is not None else ():
            found[f"{module}:{function.function}"] = function.outputs
    return found


def _module_of(result, root: Path) -> str | None:
    """The dotted module a result's file is imported as with `root` on sys.path (`pkg` for
    pkg/__init__.py), a notebook's path under `root` as a notebook entry names it
    (`nb/name.ipynb`), or None for a file outside `root`."""
    try:
        relative = result.file.path.absolute().relative_to(root.absolute())
    except ValueError:
        return None
    if relative.suffix == ".ipynb":
        return relative.as_posix()
    parts = relative.with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _as_root(path: Path) -> Path:
    """A file's root is its folder (its module is then the file's stem)."""
    path = path.absolute()
    return path if path.is_dir() else path.parent
