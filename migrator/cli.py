"""The `pmap-migrate` command line: diff, apply, scan, check.

Exit codes are the same for every command: 0 nothing to do, 1 changes pending or something
needs a human (or an equivalence mismatch), 2 a tool error. A bad file never stops a run.
Results stream: each file is printed or written as soon as it is done and only its findings
are kept, so memory does not grow with the size of the tree.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from migrator import report
from migrator.diffing import unified_diff
from migrator.files import discover
from migrator.runner import FileResult, copy_other_files, process_all, process_files, write_result
from transforms.target import NEWEST, TargetJax

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Migrate jax.pmap programs to jax.jit + jax.shard_map, and prove it.",
)


class Format(str, enum.Enum):
    text = "text"
    json = "json"


PathsArg = typer.Argument(..., help="Files or directories to migrate.", show_default=False)
TargetOpt = typer.Option(NEWEST, "--target-jax", help="JAX version the output is written for.")
JobsOpt = typer.Option(
    0, "--jobs", "-j", help="Worker processes (0: one per core). Output order does not depend on it."
)
ProgressOpt = typer.Option(True, "--progress/--no-progress", help="Progress bar on a terminal.")


def _target(text: str) -> TargetJax:
    try:
        return TargetJax.parse(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--target-jax") from None


def _run(
    paths: list[Path], target: str, jobs: int, progress: bool, handle: Callable[[FileResult], None]
) -> list[FileResult]:
    """Process every file, hand each full result to `handle`, keep the slim ones."""
    files = list(discover(paths))
    workers = jobs or os.cpu_count() or 1
    workers = min(workers, max(1, len(files) // 8))  # processes only pay off on larger trees
    show = progress and sys.stderr.isatty() and sys.stdout.isatty() and len(files) > 1
    kept = []
    with _progress(show, len(files)) as advance:
        for result in process_files(files, _target(target), workers):
            handle(result)
            kept.append(result.slim())
            advance()
    return kept


@contextlib.contextmanager
def _progress(show: bool, total: int):
    if not show:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("pmap-migrate", total=total)
        yield lambda: bar.advance(task)


@app.command()
def diff(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    context: int = typer.Option(3, "--context", "-U", help="Lines of context in the diff."),
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
) -> None:
    """Dry run: print a unified diff (git apply / patch -p1) and the findings on stderr."""

    def show(result: FileResult) -> None:
        if result.changed:
            text = unified_diff(
                result.original.decode(result.encoding),
                result.migrated.decode(result.encoding),
                result.file.display,
                context,
            )
            sys.stdout.buffer.write(text.encode(result.encoding))
            sys.stdout.buffer.flush()
        report.write_text([result], sys.stderr)

    results = _run(paths, target_jax, jobs, progress, show)
    typer.echo(report.summary_line(results, "would change"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@app.command()
def apply(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", help="Write the migrated tree here (other files copied) instead of in place."
    ),
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
) -> None:
    """Rewrite files in place (atomically), or into --out-dir."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_other_files(paths, out_dir)

    def write(result: FileResult) -> None:
        write_result(result, out_dir)
        report.write_text([result], sys.stderr)

    results = _run(paths, target_jax, jobs, progress, write)
    typer.echo(report.summary_line(results, "changed"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=False))


@app.command()
def scan(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    format: Format = typer.Option(Format.text, "--format", help="text or json."),
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
) -> None:
    """Inventory: list every pmap site and finding, change nothing."""
    as_text = format is Format.text
    results = _run(
        paths, target_jax, jobs, progress,
        (lambda r: report.write_text([r], sys.stdout)) if as_text else (lambda r: None),
    )
    if as_text:
        typer.echo(report.summary_line(results, "would change"), err=True)
    else:
        report.write_json(results, sys.stdout)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@app.command()
def check(
    paths: List[Path] = typer.Argument(
        ..., help="ORIGINAL MIGRATED roots, or one ORIGINAL root to migrate into a temporary copy."
    ),
    entry: List[str] = typer.Option([], "--entry", help="MODULE:FUNCTION returning a pytree."),
    function: Optional[str] = typer.Option(
        None, "--function", help="Property mode: MODULE:NAME of a pmapped function to call."
    ),
    inputs: Optional[str] = typer.Option(
        None, "--inputs",
        help="Property mode: MODULE:NAME of a hypothesis strategy or example list of argument tuples.",
    ),
    max_examples: int = typer.Option(50, "--max-examples", help="Property mode: inputs to draw."),
    devices: str = typer.Option("8", "--devices", help="Comma-separated device counts."),
    reference_python: Optional[str] = typer.Option(
        None, "--reference-python", help="Interpreter for the original (e.g. a jax 0.4.38 venv)."
    ),
    report_json: Optional[Path] = typer.Option(None, "--report-json"),
    junit: Optional[Path] = typer.Option(None, "--junit"),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds per run before it is killed."),
    rng_compat: bool = typer.Option(
        True, "--rng-compat/--no-rng-compat",
        help="Run both sides with jax_threefry_partitionable=1 so old and new JAX draw the same random numbers.",
    ),
    target_jax: str = TargetOpt,
) -> None:
    """Run original and migrated entries on N fake CPU devices and compare them."""
    import tempfile

    from rich.console import Console

    from equivalence import reports as check_reports
    from equivalence.check import CheckOptions, exit_code
    from equivalence.check import check as run_check

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
        if ":" not in name:
            raise typer.BadParameter(f"{name!r} is not MODULE:FUNCTION", param_hint="--entry")
    try:
        counts = tuple(int(d) for d in devices.split(",") if d.strip())
    except ValueError:
        raise typer.BadParameter(f"{devices!r} is not a list of numbers", param_hint="--devices") from None
    if not counts or min(counts) < 1:
        raise typer.BadParameter("device counts must be positive", param_hint="--devices")
    options = CheckOptions(devices=counts, timeout=timeout, rng_compat=rng_compat)
    if reference_python:
        options.reference_python = reference_python
    roots = [_as_root(p) for p in paths]
    console = Console(width=None if sys.stdout.isatty() else 160)
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-check-") as scratch:
        if len(roots) == 1:
            roots.append(_migrate_copy(roots[0], Path(scratch) / "migrated", _target(target_jax)))
        if function:
            from equivalence.properties_cli import run_properties

            raise typer.Exit(run_properties(
                roots[0], roots[1], function, inputs, options, max_examples, console, report_json
            ))
        found = []
        for result in run_check(roots[0], roots[1], list(entry), options):
            found.append(result)
            console.print(
                f"{result.entry} [{result.devices} devices]: {result.verdict} ({result.seconds:.1f} s)",
                highlight=False,
            )
    check_reports.print_terminal(found, console)
    if report_json:
        check_reports.write_json(found, report_json)
    if junit:
        check_reports.write_junit(found, junit)
    raise typer.Exit(exit_code(found))


def _migrate_copy(root: Path, destination: Path, target: TargetJax) -> Path:
    """The single-path form of check: migrate a temporary copy, say what it could not do."""
    copy_other_files([root], destination)
    for result in process_all([root], target):
        write_result(result, destination)
        for finding in result.findings:
            if finding.severity != "info":
                typer.echo(finding.to_text(), err=True)
    return destination


def _as_root(path: Path) -> Path:
    """A file's root is its folder (its module is then the file's stem)."""
    path = path.absolute()
    return path if path.is_dir() else path.parent


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - a crash is a tool error, exit 2
        typer.echo(f"pmap-migrate: internal error: {error!r}", err=True)
        raise SystemExit(report.EXIT_ERROR)


if __name__ == "__main__":
    main()
