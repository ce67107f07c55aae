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
import signal
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from migrator import report
from migrator.config import Config, ConfigError, load_config
from migrator.diffing import colorize, notebook_cell_headers, unified_diff
from migrator.files import discover
from migrator.formats import WRITERS
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
    sarif = "sarif"
    github = "github"
    junit = "junit"


PathsArg = typer.Argument(..., help="Files or directories to migrate.", show_default=False)
TargetOpt = typer.Option(
    None, "--target-jax",
    help=f"JAX version the output is written for: a version or 'auto' (default: the project's "
    f"[tool.pmap-migrate] target-jax, else {NEWEST}).",
)
FormatOpt = typer.Option(Format.text, "--format", help="Findings as text, json, sarif, github or junit.")
JobsOpt = typer.Option(
    0, "--jobs", "-j", help="Worker processes (0: one per core). Output order does not depend on it."
)
ProgressOpt = typer.Option(True, "--progress/--no-progress", help="Progress bar on a terminal.")
StyleOpt = typer.Option(
    None, "--style",
    help="faithful (pmap's calling contract kept; default) or global (no device axis where the "
    "whole program is recognised; see README 'Styles'). Default: [tool.pmap-migrate] style.",
)


def _target(text: str | None) -> TargetJax:
    try:
        return TargetJax.parse(text or NEWEST)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--target-jax") from None


def _config(paths: list[Path], target: str | None, style: str | None = None) -> Config:
    """[tool.pmap-migrate] from the nearest pyproject.toml; command-line flags win."""
    if target and target != "auto":
        _target(target)
    try:
        return load_config(paths, override_target=target, override_style=style)
    except ConfigError as error:
        typer.echo(f"pmap-migrate: {error}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None


def _run(
    paths: list[Path], target: str | None, jobs: int, progress: bool,
    handle: Callable[[FileResult], None], style: str | None = None,
) -> list[FileResult]:
    """Process every file, hand each full result to `handle`, keep the slim ones."""
    config = _config(paths, target, style)
    files = list(discover(paths, config))
    workers = jobs or os.cpu_count() or 1
    workers = min(workers, max(1, len(files) // 8))  # processes only pay off on larger trees
    show = progress and sys.stderr.isatty() and sys.stdout.isatty() and len(files) > 1
    kept = []
    with _progress(show, len(files)) as advance:
        for result in process_files(files, _target(config.target_jax), workers, config):
            handle(result)
            kept.append(result.slim())
            advance()
    return kept


class _Findings:
    """Findings of a streaming run in the chosen format: text and github line by line,
    the document formats (json, sarif, junit) at the end."""

    def __init__(self, format: Format, stream):
        self.format, self.stream = format, stream
        self.writer = WRITERS[format.value]() if format.value in WRITERS else None

    def add(self, result: FileResult) -> None:
        if self.format is Format.text:
            report.write_text([result], self.stream)
        elif self.writer is not None:
            self.writer.add(result)
            if self.format is Format.github:
                self.writer.finish(self.stream)
                self.writer = WRITERS["github"]()

    def finish(self, results: list[FileResult]) -> None:
        if self.format is Format.json:
            report.write_json(results, self.stream)
        elif self.writer is not None and self.format is not Format.github:
            self.writer.finish(self.stream)


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
    color: Optional[bool] = typer.Option(
        None, "--color/--no-color", help="Colour the diff (default: when stdout is a terminal)."
    ),
    format: Format = FormatOpt,
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Dry run: print a unified diff (git apply / patch -p1) and the findings on stderr."""
    colored = sys.stdout.isatty() if color is None else color
    findings = _Findings(format, sys.stderr)

    def show(result: FileResult) -> None:
        if result.changed:
            text = unified_diff(
                result.original.decode(result.encoding),
                result.migrated.decode(result.encoding),
                result.file.display,
                context,
                section=notebook_cell_headers if result.file.path.suffix == ".ipynb" else None,
            )
            if colored:
                text = colorize(text)
            sys.stdout.buffer.write(text.encode(result.encoding))
            sys.stdout.buffer.flush()
        findings.add(result)

    results = _run(paths, target_jax, jobs, progress, show, style)
    findings.finish(results)
    typer.echo(report.summary_line(results, "would change"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@app.command()
def apply(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", help="Write the migrated tree here (other files copied) instead of in place."
    ),
    interactive: bool = typer.Option(
        False, "--interactive", "-i", help="Ask per hunk: yes / no / all / done with file / quit."
    ),
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Rewrite files in place (atomically), or into --out-dir."""
    if interactive:
        _apply_interactively(paths, target_jax, out_dir, jobs, style)
    _prepare_out_dir(paths, out_dir)

    def write(result: FileResult) -> None:
        write_result(result, out_dir)
        report.write_text([result], sys.stderr)

    results = _run(paths, target_jax, jobs, progress, write, style)
    typer.echo(report.summary_line(results, "changed"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=False))


def _prepare_out_dir(paths: list[Path], out_dir: Path | None) -> None:
    """--out-dir receives every other file of the tree, unchanged, before the migrated ones."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_other_files(paths, out_dir)


def _apply_interactively(paths, target_jax, out_dir, jobs, style=None) -> None:
    """apply --interactive: every change is shown hunk by hunk and written only if accepted."""
    from migrator.interactive import refuse_without_tty, select_changes

    message = refuse_without_tty()
    if message:
        typer.echo(message, err=True)
        raise typer.Exit(report.EXIT_ERROR)
    full: list[FileResult] = []
    _run(paths, target_jax, jobs, False, full.append, style)
    try:
        chosen = select_changes(full, ask=input, show=lambda text: print(colorize(text)))
    except KeyboardInterrupt:
        typer.echo("\npmap-migrate: interrupted, nothing written", err=True)
        raise typer.Exit(130) from None
    _prepare_out_dir(paths, out_dir)
    for result in chosen:
        write_result(result, out_dir)
        report.write_text([result], sys.stderr)
    final = [r.slim() for r in chosen]
    typer.echo(report.summary_line(final, "changed"), err=True)
    raise typer.Exit(report.exit_code(final, pending_counts=False))


@app.command()
def scan(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    format: Format = FormatOpt,
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Inventory: list every pmap site and finding, change nothing."""
    findings = _Findings(format, sys.stdout)
    results = _run(paths, target_jax, jobs, progress, findings.add, style)
    findings.finish(results)
    typer.echo(report.summary_line(results, "would change"), err=True)
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
    style: Optional[str] = StyleOpt,
) -> None:
    """Run original and migrated entries on N fake CPU devices and compare them.
    With --style global, outputs are compared through the migration's layout map."""
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
    style = _config(paths[:1], None, style).style
    options = CheckOptions(devices=counts, timeout=timeout, rng_compat=rng_compat)
    if reference_python:
        # Workers run with the program's folder as working directory: resolve the path here.
        options.reference_python = (
            os.path.abspath(reference_python) if os.sep in reference_python else reference_python
        )
    roots = [_as_root(p) for p in paths]
    console = Console(width=None if sys.stdout.isatty() else 160)
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-check-") as scratch:
        if len(roots) == 1:
            roots.append(_migrate_copy(roots[0], Path(scratch) / "migrated", _target(target_jax),
                                       style))
        if style == "global":
            from equivalence.layouts import layouts_of

            options.layouts = layouts_of(roots[0], _target(target_jax))
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


def _migrate_copy(root: Path, destination: Path, target: TargetJax, style: str = "faithful") -> Path:
    """The single-path form of check: migrate a temporary copy, say what it could not do."""
    copy_other_files([root], destination)
    for result in process_all([root], target, style=style):
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
    # SIGTERM (CI cancellation, timeout) unwinds like Ctrl-C, so a write in progress removes
    # its temporary file; the file being replaced is never half-written either way.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        app()
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - a crash is a tool error, exit 2
        typer.echo(f"pmap-migrate: internal error: {error!r}", err=True)
        raise SystemExit(report.EXIT_ERROR)


if __name__ == "__main__":
    main()
