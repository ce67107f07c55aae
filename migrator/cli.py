"""The `pmap-migrate` command line: diff, apply, scan, check.

Exit codes are the same for every command: 0 nothing to do, 1 changes pending or something
needs a human (or an equivalence mismatch), 2 a tool error. A bad file never stops a run.
Results stream: each file is printed or written as soon as it is done and only its findings
are kept, so memory does not grow with the size of the tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import signal
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from migrator import report
from migrator.check_command import run_check
from migrator.config_file import ConfigError, load_config
from migrator.diffing import colorize, notebook_cell_headers, unified_diff
from migrator.files import display_name
from migrator.formats import WRITERS
from migrator.helper_module_run import helper_module_for_run, shared_helpers, write_helper_module
from migrator.options import MigrationOptions
from migrator.runner import (
    FileResult, copy_other_files, process_files, tune_gc, write_result,
)
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
HelperModuleOpt = typer.Option(
    None, "--helper-module", metavar="DOTTED.NAME",
    help="Write the helpers once into this module of the project; migrated files import them "
    "(default: the project's [tool.pmap-migrate] helper-module, else each file has its own).",
)
StyleOpt = typer.Option(
    None, "--style",
    help="faithful (pmap's calling contract kept; default) or global (no device axis where the "
    "whole program is recognised; see README 'Styles'). Default: [tool.pmap-migrate] style.",
)
GitignoreOpt = typer.Option(
    None, "--respect-gitignore/--no-respect-gitignore",
    help="Skip files the project's .gitignore files ignore (default: the project's "
    "[tool.pmap-migrate] respect-gitignore, else on).",
)


def _target(text: str | None) -> TargetJax:
    try:
        return TargetJax.parse(text or NEWEST)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--target-jax") from None


def _options(paths: list[Path], target: str | None, **flags) -> MigrationOptions:
    """The run's options: [tool.pmap-migrate] from the nearest pyproject.toml, with the
    command-line flags winning (a flag left at None keeps the file's setting)."""
    if target and target != "auto":
        _target(target)
    try:
        config = load_config(paths, override_target=target, override_style=flags.pop("style", None))
        config = dataclasses.replace(config, **{k: v for k, v in flags.items() if v is not None})
        return MigrationOptions.from_config(config)
    except ConfigError as error:
        typer.echo(f"pmap-migrate: {error}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None


def _run(
    paths: list[Path], options: MigrationOptions, jobs: int, progress: bool,
    handle: Callable[[FileResult], None],
) -> list[FileResult]:
    """Process every file, hand each full result to `handle`, keep the slim ones."""
    files = list(options.discover(paths))
    workers = jobs or os.cpu_count() or 1
    workers = min(workers, max(1, len(files) // 8))  # processes only pay off on larger trees
    show = progress and sys.stderr.isatty() and sys.stdout.isatty() and len(files) > 1
    kept = []
    tune_gc()
    with _progress(show, len(files)) as advance:
        for result in process_files(files, options, workers):
            handle(result)
            kept.append(result.slim())
            advance()
    global _finished_run
    _finished_run = True
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
    helper_module: Optional[str] = HelperModuleOpt,
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Dry run: print a unified diff (git apply / patch -p1) and the findings on stderr."""
    colored = sys.stdout.isatty() if color is None else color
    findings = _Findings(format, sys.stderr)
    options = _options(
        paths, target_jax, helper_module=helper_module, respect_gitignore=respect_gitignore,
        style=style,
    )
    helper = helper_module_for_run(paths, options)

    def write_diff(old: bytes, new: bytes, encoding: str, display: str, **options) -> None:
        text = unified_diff(old.decode(encoding), new.decode(encoding), display, context, **options)
        sys.stdout.buffer.write((colorize(text) if colored else text).encode(encoding))
        sys.stdout.buffer.flush()

    def show(result: FileResult) -> None:
        if result.changed:
            notebook = result.file.path.suffix == ".ipynb"
            write_diff(result.original, result.migrated, result.encoding, result.file.display,
                       section=notebook_cell_headers if notebook else None)
        findings.add(result)

    if helper is None:
        results = _run(paths, options, jobs, progress, show)
    else:  # every file is checked before anything is shown: the diff is whole or absent
        full: list[FileResult] = []
        results = _run(paths, options, jobs, progress, full.append)
        current, new = shared_helpers(helper, full, options)
        if new is not None:
            write_diff(current, new, "utf-8", display_name(helper.path), new_file=not current)
        for result in full:
            show(result)
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
    helper_module: Optional[str] = HelperModuleOpt,
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Rewrite files in place (atomically), or into --out-dir."""
    options = _options(
        paths, target_jax, helper_module=helper_module, respect_gitignore=respect_gitignore,
        style=style,
    )
    helper = helper_module_for_run(paths, options)
    if interactive:
        _apply_interactively(paths, options, helper, out_dir, jobs)

    def write(result: FileResult) -> None:
        write_result(result, out_dir)
        report.write_text([result], sys.stderr)

    if helper is None:
        _prepare_out_dir(paths, out_dir, options)
        results = _run(paths, options, jobs, progress, write)
    else:  # every file is checked before anything is written
        full: list[FileResult] = []
        results = _run(paths, options, jobs, progress, full.append)
        shared = shared_helpers(helper, full, options)
        _prepare_out_dir(paths, out_dir, options)
        write_helper_module(helper, shared, paths, out_dir)
        for result in full:
            write(result)
    typer.echo(report.summary_line(results, "changed"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=False))


def _prepare_out_dir(paths: list[Path], out_dir: Path | None, options: MigrationOptions) -> None:
    """--out-dir receives every other file of the tree, unchanged, before the migrated ones."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_other_files(paths, out_dir, options)


def _apply_interactively(paths, options, helper, out_dir, jobs) -> None:
    """apply --interactive: every change is shown hunk by hunk and written only if accepted."""
    from migrator.interactive import refuse_without_tty, select_changes

    message = refuse_without_tty()
    if message:
        typer.echo(message, err=True)
        raise typer.Exit(report.EXIT_ERROR)
    full: list[FileResult] = []
    _run(paths, options, jobs, False, full.append)
    try:
        chosen = select_changes(full, ask=input, show=lambda text: print(colorize(text)))
    except KeyboardInterrupt:
        typer.echo("\npmap-migrate: interrupted, nothing written", err=True)
        raise typer.Exit(130) from None
    shared = shared_helpers(helper, chosen, options) if helper is not None else None
    _prepare_out_dir(paths, out_dir, options)
    if shared is not None:
        write_helper_module(helper, shared, paths, out_dir)
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
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Inventory: list every pmap site and finding, change nothing."""
    findings = _Findings(format, sys.stdout)
    options = _options(paths, target_jax, respect_gitignore=respect_gitignore, style=style)
    results = _run(paths, options, jobs, progress, findings.add)
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
    processes: int = typer.Option(
        1, "--processes", min=1,
        help="Run each side as P processes on localhost (jax.distributed, gloo), each with "
             "devices / P devices, and compare process by process.",
    ),
    reference_python: Optional[str] = typer.Option(
        None, "--reference-python", help="Interpreter for the original (e.g. a jax 0.4.38 venv)."
    ),
    report_json: Optional[Path] = typer.Option(None, "--report-json"),
    junit: Optional[Path] = typer.Option(None, "--junit"),
    timeout: float = typer.Option(
        300.0, "--timeout",
        help="Seconds per entry: each run of an entry (each side, repeat and device count) "
             "is killed after S seconds; a side whose first run fails or times out is not "
             "run again.",
    ),
    rng_compat: bool = typer.Option(
        True, "--rng-compat/--no-rng-compat",
        help="Run both sides with jax_threefry_partitionable=1 so old and new JAX draw the same random numbers.",
    ),
    repeat: int = typer.Option(
        2, "--repeat", min=1,
        help="Run each side N times; a side that disagrees with itself is 'nondeterministic' "
             "(exit 1), not 'different'. 1 turns this guard off.",
    ),
    target_jax: str = TargetOpt,
    style: Optional[str] = StyleOpt,
) -> None:
    """Run original and migrated entries on N fake CPU devices and compare them.
    With --style global, outputs are compared through the migration's layout map."""
    migration = _options(paths[:1], target_jax, style=style)
    raise typer.Exit(run_check(
        paths, entry, function, inputs, max_examples, devices, processes, reference_python,
        report_json, junit, timeout, rng_compat, repeat, migration,
    ))


# Set once diff, apply or scan has handed every result on: what is left is the interpreter's
# teardown, which frees every module and object one by one (0.1 s after a libcst run, a sixth
# of a one-file run). `check` never sets it: its runs and temporary folders end through the
# normal exit.
_finished_run = False


def _exit_without_teardown(code: int) -> None:
    """Flush what was printed, then end the process as it is (as mypy does)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or stream
            pass
    os._exit(code)


def main() -> None:
    # SIGTERM (CI cancellation, timeout) unwinds like Ctrl-C, so a write in progress removes
    # its temporary file; the file being replaced is never half-written either way.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        app()
    except SystemExit as done:
        if _finished_run and isinstance(done.code, (int, type(None))):
            _exit_without_teardown(done.code or 0)
        raise
    except Exception as error:  # noqa: BLE001 - a crash is a tool error, exit 2
        typer.echo(f"pmap-migrate: internal error: {error!r}", err=True)
        raise SystemExit(report.EXIT_ERROR)


if __name__ == "__main__":
    main()
