"""The `pmap-migrate` command line: diff, apply, scan, check, explain.

Exit codes are the same for every command: 0 nothing to do, 1 changes pending or something
needs a human (or an equivalence mismatch), 2 a tool error. A bad file never stops a run.
Results stream: each file is printed or written as soon as it is done and only its findings
are kept, so memory does not grow with the size of the tree.

What is printed goes to stdout (the diff; scan's findings) or to `--output`; the findings of
diff and apply, the summary line and the progress bar go to stderr. `--quiet` keeps only the
diff and the findings; `--severity` hides findings below it (the exit code still counts them).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer
from rich.markup import escape

from migrator import report
from migrator.check_command import run_check
from migrator.cli_help import Command, Group
from migrator.config_file import CommandLine, ConfigError, check_glob, load_config, parse_code
from migrator.diffing import colorize, notebook_cell_headers, unified_diff
from migrator.files import display_name
from migrator.formats import WRITERS, write_statistics
from migrator.helper_module_run import helper_module_for_run, shared_helpers, write_helper_module
from migrator.interrupts import EXIT_INTERRUPTED, Interrupted, install_handlers
from migrator.options import MigrationOptions
from migrator.runner import (
    FileResult, copy_other_files, process_files, tune_gc, write_result,
)
from migrator.stdin_source import config_paths, process_stdin, reads_stdin
from migrator.textio import lossless_codec
from transforms.codes.rules import SEVERITIES
from transforms.target import NEWEST, TargetJax

app = typer.Typer(
    cls=Group,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="Migrate jax.pmap programs to jax.jit + jax.shard_map, and prove it.",
)
command = app.command  # every command is a migrator.cli_help.Command: see there


class Format(str, enum.Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"
    junit = "junit"


class Style(str, enum.Enum):
    faithful = "faithful"
    global_ = "global"


class Severity(str, enum.Enum):
    info = "info"
    warning = "warning"
    error = "error"


CONFIG = escape("[tool.pmap-migrate]")  # rich would read the brackets as markup

PathsArg = typer.Argument(
    ..., metavar="PATH", show_default=False,
    help="Files or directories to migrate; - reads the source from standard input.",
)
TargetOpt = typer.Option(
    None, "--target-jax", metavar="VERSION",
    help=f"JAX version the output is written for: a version or 'auto' (default: the project's "
    f"{CONFIG} target-jax, else {NEWEST}).",
)
FormatOpt = typer.Option(Format.text, "--format", help="Findings as text, json, sarif, github or junit.")
JobsOpt = typer.Option(
    0, "--jobs", "-j", help="Worker processes (0: one per core). Output order does not depend on it."
)
ProgressOpt = typer.Option(
    True, "--progress/--no-progress", help="Progress bar, on stderr, when stderr is a terminal."
)
HelperModuleOpt = typer.Option(
    None, "--helper-module", metavar="DOTTED.NAME",
    help=f"Write the helpers once into this module of the project; migrated files import them "
    f"(default: the project's {CONFIG} helper-module, else each file has its own).",
)
StyleOpt = typer.Option(
    None, "--style", show_default=False,
    help=f"faithful (pmap's calling contract kept) or global (no device axis where the whole "
    f"program is recognised; see README 'Styles'). Default: the project's {CONFIG} style, "
    f"else faithful.",
)
GitignoreOpt = typer.Option(
    None, "--respect-gitignore/--no-respect-gitignore",
    help=f"Skip files the project's .gitignore files ignore (default: the project's "
    f"{CONFIG} respect-gitignore, else on).",
)


def _codes(values: Optional[List[str]]) -> Optional[List[str]]:
    """Comma-separated codes or prefixes, the flag repeatable; blamed on the flag if wrong."""
    if not values:
        return None
    try:
        return [parse_code(part) for value in values for part in value.split(",") if part.strip()]
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def _globs(values: Optional[List[str]]) -> Optional[List[str]]:
    if not values:
        return None
    try:
        return [check_glob(part.strip()) for value in values for part in value.split(",") if part.strip()]
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


SelectOpt = typer.Option(
    None, "--select", metavar="CODES", callback=_codes,
    help=f"Finding codes or prefixes to report, comma-separated (PM3,PM100). Replaces the "
    f"project's {CONFIG} select; its ignore and per-path entries still apply.",
)
IgnoreOpt = typer.Option(
    None, "--ignore", metavar="CODES", callback=_codes,
    help=f"Finding codes or prefixes to turn off, comma-separated. Added to the project's "
    f"{CONFIG} ignore. Ignoring PM100 means: do not migrate.",
)
ExcludeOpt = typer.Option(
    None, "--exclude", metavar="GLOBS", callback=_globs,
    help=f"Globs of files and directories to skip, comma-separated. Replaces the project's "
    f"{CONFIG} exclude, and with it the defaults (.git, venvs, build...).",
)
ExtendExcludeOpt = typer.Option(
    None, "--extend-exclude", metavar="GLOBS", callback=_globs,
    help="Like --exclude, but added to the exclusions already in force.",
)
QuietOpt = typer.Option(
    False, "--quiet", "-q", help="Print the diff and the findings only: no summary line, no progress bar."
)
SeverityOpt = typer.Option(
    Severity.info, "--severity",
    help="Print only findings of this severity or above (the exit code still counts them all).",
)
StatisticsOpt = typer.Option(
    False, "--statistics",
    help="Instead of each finding, the count per code (with --format text or json).",
)
StdinFilenameOpt = typer.Option(
    None, "--stdin-filename", metavar="PATH",
    help="With -: the name of the source read from standard input, for the configuration, "
    "the per-path settings and the messages.",
)


@dataclasses.dataclass(frozen=True)
class _Selection:
    """What the command line says about which files and findings a run takes."""

    select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    exclude: Optional[List[str]] = None
    extend_exclude: Optional[List[str]] = None

    def command_line(self) -> CommandLine:
        return CommandLine(
            select=tuple(self.select) if self.select else None,
            ignore=tuple(self.ignore or ()),
            exclude=tuple(self.exclude) if self.exclude else None,
            extend_exclude=tuple(self.extend_exclude or ()),
        )


def _target(text: str | None) -> TargetJax:
    try:
        return TargetJax.parse(text or NEWEST)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--target-jax") from None


def _options(
    paths: list[Path], target: str | None, selection: _Selection = _Selection(),
    stdin_filename: Path | None = None, **flags,
) -> MigrationOptions:
    """The run's options: [tool.pmap-migrate] from the nearest pyproject.toml, with the
    command-line flags winning (a flag left at None keeps the file's setting)."""
    if target and target != "auto":
        _target(target)
    style = flags.pop("style", None)
    if reads_stdin(paths):
        paths = config_paths(stdin_filename)
    try:
        config = load_config(
            paths, override_target=target, override_style=style.value if style else None,
            command_line=selection.command_line(),
        )
        config = dataclasses.replace(config, **{k: v for k, v in flags.items() if v is not None})
        return MigrationOptions.from_config(config)
    except ConfigError as error:
        typer.echo(f"pmap-migrate: {error}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None


def _check_stdin_use(paths: list[Path], stdin_filename: Path | None, **refused) -> None:
    """`-` is the only path when it is given; the flags that need files are refused with it."""
    if not reads_stdin(paths):
        if stdin_filename is not None:
            raise typer.BadParameter("needs - as the path", param_hint="--stdin-filename")
        return
    if len(paths) > 1:
        raise typer.BadParameter("- (standard input) must be the only path", param_hint="PATH")
    for flag, value in refused.items():
        if value:
            raise typer.BadParameter("cannot be used with - (standard input)", param_hint=flag)


def _show_progress(progress: bool, quiet: bool, files: int) -> bool:
    """The bar is drawn on stderr: shown when stderr is a terminal, wherever stdout goes
    (`diff > x.patch` too)."""
    return progress and not quiet and files > 1 and sys.stderr.isatty()


def _run(
    paths: list[Path], options: MigrationOptions, jobs: int, progress: bool,
    handle: Callable[[FileResult], None], *, quiet: bool = False,
    stdin_filename: Path | None = None,
) -> list[FileResult]:
    """Process every file (or standard input), hand each full result to `handle`, keep the
    slim ones."""
    global _finished_run
    if reads_stdin(paths):
        result = process_stdin(sys.stdin.buffer.read(), stdin_filename, options)
        handle(result)
        _finished_run = True
        return [result.slim()]
    files = list(options.discover(paths))
    workers = jobs or os.cpu_count() or 1
    workers = min(workers, max(1, len(files) // 8))  # processes only pay off on larger trees
    kept = []
    tune_gc()
    # closing(): an interrupt while a result is handled stops the workers too.
    with _progress(_show_progress(progress, quiet, len(files)), len(files)) as advance, \
            contextlib.closing(process_files(files, options, workers)) as results:
        for result in results:
            handle(result)
            kept.append(result.slim())
            advance()
    _finished_run = True
    return kept


class _Findings:
    """Findings of a streaming run in the chosen format: text and github line by line,
    the document formats (json, sarif, junit) at the end. Findings below `severity` are left
    out; with `statistics`, only the count per code is written, at the end."""

    def __init__(self, format: Format, stream, severity: Severity = Severity.info,
                 statistics: bool = False):
        if statistics and format not in (Format.text, Format.json):
            raise typer.BadParameter("works with --format text or json", param_hint="--statistics")
        self.format, self.stream, self.statistics = format, stream, statistics
        self.minimum = SEVERITIES.index(severity.value)
        self.counts: collections.Counter[str] = collections.Counter()
        self.writer = WRITERS[format.value]() if format.value in WRITERS else None

    def shown(self, result: FileResult) -> FileResult:
        findings = [f for f in result.findings if SEVERITIES.index(f.severity) >= self.minimum]
        return result if len(findings) == len(result.findings) else dataclasses.replace(result, findings=findings)

    def add(self, result: FileResult) -> None:
        result = self.shown(result)
        if self.statistics:
            self.counts.update(f.code for f in result.findings)
        elif self.format is Format.text:
            report.write_text([result], self.stream)
            self.stream.flush()
        elif self.writer is not None:
            self.writer.add(result)
            if self.format is Format.github:
                self.writer.finish(self.stream)
                self.writer = WRITERS["github"]()

    def finish(self, results: list[FileResult]) -> None:
        if self.statistics:
            write_statistics(self.counts, self.stream, as_json=self.format is Format.json)
        elif self.format is Format.json:
            report.write_json([self.shown(r) for r in results], self.stream)
        elif self.writer is not None and self.format is not Format.github:
            self.writer.finish(self.stream)


def _summary(results: list[FileResult], verb: str, quiet: bool, style: str) -> None:
    if not quiet:
        typer.echo(report.summary_line(results, verb, style), err=True)


@contextlib.contextmanager
def _progress(show: bool, total: int):
    if not show:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("pmap-migrate", total=total)
        yield lambda: bar.advance(task)


@contextlib.contextmanager
def _output(path: Path | None, binary: bool):
    """--output FILE, else stdout; bytes for a diff (each file in its own encoding), text
    (UTF-8) for findings."""
    if path is None:
        yield sys.stdout.buffer if binary else sys.stdout
        return
    try:
        handle = path.open("wb") if binary else path.open("w", encoding="utf-8", newline="")
    except OSError as error:
        raise typer.BadParameter(f"cannot be written: {error.strerror or error}", param_hint="--output")
    with handle:
        yield handle


def _version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            version = metadata.version("pmap-migrate")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        typer.echo(f"pmap-migrate {version}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Migrate jax.pmap programs to jax.jit + jax.shard_map, and prove it."""


@command(cls=Command)
def diff(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    context: int = typer.Option(3, "--context", "-U", help="Lines of context in the diff."),
    color: Optional[bool] = typer.Option(
        None, "--color/--no-color", help="Colour the diff (default: when it goes to a terminal)."
    ),
    format: Format = FormatOpt,
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="FILE", help="Write the diff to FILE instead of stdout."
    ),
    select: Optional[List[str]] = SelectOpt,
    ignore: Optional[List[str]] = IgnoreOpt,
    exclude: Optional[List[str]] = ExcludeOpt,
    extend_exclude: Optional[List[str]] = ExtendExcludeOpt,
    severity: Severity = SeverityOpt,
    statistics: bool = StatisticsOpt,
    quiet: bool = QuietOpt,
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    helper_module: Optional[str] = HelperModuleOpt,
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[Style] = StyleOpt,
    stdin_filename: Optional[Path] = StdinFilenameOpt,
) -> None:
    """Dry run: print a unified diff (git apply / patch -p1) and the findings on stderr."""
    _check_stdin_use(paths, stdin_filename, **{"--helper-module": helper_module})
    findings = _Findings(format, sys.stderr, severity, statistics)
    options = _options(
        paths, target_jax, _Selection(select, ignore, exclude, extend_exclude), stdin_filename,
        helper_module=helper_module, respect_gitignore=respect_gitignore, style=style,
    )
    helper = helper_module_for_run(paths, options) if not reads_stdin(paths) else None
    with _output(output, binary=True) as out:
        colored = (output is None and sys.stdout.isatty()) if color is None else color

        def write_diff(old: bytes, new: bytes, encoding: str, display: str, **options) -> None:
            codec = lossless_codec(encoding)  # a BOM goes in the first line, not before `---`
            text = unified_diff(old.decode(codec), new.decode(codec), display, context, **options)
            out.write((colorize(text) if colored else text).encode(codec))
            out.flush()

        def show(result: FileResult) -> None:
            if result.changed:
                notebook = result.file.path.suffix == ".ipynb"
                write_diff(result.original, result.migrated, result.encoding, result.file.display,
                           section=notebook_cell_headers if notebook else None)
            findings.add(result)

        run = dict(quiet=quiet, stdin_filename=stdin_filename)
        if helper is None:
            results = _run(paths, options, jobs, progress, show, **run)
        else:  # every file is checked before anything is shown: the diff is whole or absent
            full: list[FileResult] = []
            results = _run(paths, options, jobs, progress, full.append, **run)
            current, new = shared_helpers(helper, full, options)
            if new is not None:
                write_diff(current, new, "utf-8", display_name(helper.path), new_file=not current)
            for result in full:
                show(result)
    findings.finish(results)
    _summary(results, "would change", quiet, options.style)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@command(cls=Command)
def apply(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", metavar="DIR",
        help="Write the migrated tree here (other files copied) instead of in place.",
    ),
    interactive: bool = typer.Option(
        False, "--interactive", "-i", help="Ask per hunk: yes / no / all / done with file / quit."
    ),
    select: Optional[List[str]] = SelectOpt,
    ignore: Optional[List[str]] = IgnoreOpt,
    exclude: Optional[List[str]] = ExcludeOpt,
    extend_exclude: Optional[List[str]] = ExtendExcludeOpt,
    severity: Severity = SeverityOpt,
    quiet: bool = QuietOpt,
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    helper_module: Optional[str] = HelperModuleOpt,
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[Style] = StyleOpt,
    stdin_filename: Optional[Path] = StdinFilenameOpt,
) -> None:
    """Rewrite files in place (atomically), or into --out-dir.

    With -, the migrated source of standard input goes to stdout, the findings to stderr."""
    _check_stdin_use(paths, stdin_filename, **{
        "--helper-module": helper_module, "--out-dir": out_dir, "--interactive": interactive,
    })
    findings = _Findings(Format.text, sys.stderr, severity)
    options = _options(
        paths, target_jax, _Selection(select, ignore, exclude, extend_exclude), stdin_filename,
        helper_module=helper_module, respect_gitignore=respect_gitignore, style=style,
    )
    if reads_stdin(paths):
        def echo(result: FileResult) -> None:
            sys.stdout.buffer.write(result.migrated if result.changed else result.original)
            sys.stdout.buffer.flush()
            findings.add(result)

        results = _run(paths, options, jobs, False, echo, quiet=quiet, stdin_filename=stdin_filename)
        _summary(results, "changed", quiet, options.style)
        raise typer.Exit(report.exit_code(results, pending_counts=False))
    helper = helper_module_for_run(paths, options)
    if interactive:
        _apply_interactively(paths, options, helper, out_dir, jobs, findings, quiet)

    def write(result: FileResult) -> None:
        write_result(result, out_dir)
        findings.add(result)

    if helper is None:
        refused = _prepare_out_dir(paths, out_dir, options, findings)
        results = refused + _run(paths, options, jobs, progress, write, quiet=quiet)
    else:  # every file is checked before anything is written
        full: list[FileResult] = []
        _run(paths, options, jobs, progress, full.append, quiet=quiet)
        shared = shared_helpers(helper, full, options)
        refused = _prepare_out_dir(paths, out_dir, options, findings)
        write_helper_module(helper, shared, paths, out_dir, full)
        for result in full:
            write(result)
        results = refused + [r.slim() for r in full]  # slim after writing: what was written
    _summary(results, "changed", quiet, options.style)
    raise typer.Exit(report.exit_code(results, pending_counts=False))


def _prepare_out_dir(paths: list[Path], out_dir: Path | None, options: MigrationOptions,
                     findings: _Findings) -> list[FileResult]:
    """--out-dir receives every other file of the tree, unchanged, before the migrated ones;
    those whose destination is write-protected come back with PM008 (shown here)."""
    if out_dir is None:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    refused = copy_other_files(paths, out_dir, options)
    for result in refused:
        findings.add(result)
    return refused


def _apply_interactively(paths, options, helper, out_dir, jobs, findings, quiet) -> None:
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
    except (KeyboardInterrupt, Interrupted):
        typer.echo("\npmap-migrate: interrupted, nothing written", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    shared = shared_helpers(helper, chosen, options) if helper is not None else None
    refused = _prepare_out_dir(paths, out_dir, options, findings)
    if shared is not None:
        write_helper_module(helper, shared, paths, out_dir, chosen)
    for result in chosen:
        write_result(result, out_dir)
        findings.add(result)
    final = refused + [r.slim() for r in chosen]
    _summary(final, "changed", quiet, options.style)
    raise typer.Exit(report.exit_code(final, pending_counts=False))


@command(cls=Command)
def scan(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    format: Format = FormatOpt,
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="FILE", help="Write the findings to FILE instead of stdout."
    ),
    select: Optional[List[str]] = SelectOpt,
    ignore: Optional[List[str]] = IgnoreOpt,
    exclude: Optional[List[str]] = ExcludeOpt,
    extend_exclude: Optional[List[str]] = ExtendExcludeOpt,
    severity: Severity = SeverityOpt,
    statistics: bool = StatisticsOpt,
    quiet: bool = QuietOpt,
    jobs: int = JobsOpt,
    progress: bool = ProgressOpt,
    respect_gitignore: Optional[bool] = GitignoreOpt,
    style: Optional[Style] = StyleOpt,
    stdin_filename: Optional[Path] = StdinFilenameOpt,
) -> None:
    """Inventory: list every pmap site and finding, change nothing."""
    _check_stdin_use(paths, stdin_filename)
    options = _options(
        paths, target_jax, _Selection(select, ignore, exclude, extend_exclude), stdin_filename,
        respect_gitignore=respect_gitignore, style=style,
    )
    with _output(output, binary=False) as out:
        findings = _Findings(format, out, severity, statistics)
        results = _run(paths, options, jobs, progress, findings.add, quiet=quiet,
                       stdin_filename=stdin_filename)
        findings.finish(results)
    _summary(results, "would change", quiet, options.style)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@command(cls=Command)
def explain(
    code: str = typer.Argument(..., metavar="CODE", help="A finding code (PM612) or a rule name."),
) -> None:
    """Show what a finding code means, what to do about it, and an example (docs/RULES.md)."""
    from migrator.rules_doc import explain as explain_rule

    try:
        text = explain_rule(code)
    except KeyError as error:
        typer.echo(f"pmap-migrate: {error.args[0]}", err=True)
        raise typer.Exit(report.EXIT_ERROR) from None
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        typer.echo(text)


@command(cls=Command)
def check(
    paths: List[Path] = typer.Argument(
        ..., metavar="ROOT",
        help="ORIGINAL MIGRATED roots, or one ORIGINAL root to migrate into a temporary copy.",
    ),
    entry: List[str] = typer.Option(
        [], "--entry", metavar="MODULE:FUNCTION",
        help="MODULE:FUNCTION returning a pytree, or PATH.ipynb[:NAME]: the notebook's code "
             "cells run top to bottom, then its global NAME (bare: every global holding "
             "arrays) is compared.",
    ),
    function: Optional[str] = typer.Option(
        None, "--function", metavar="MODULE:NAME",
        help="Property mode: MODULE:NAME of a pmapped function to call.",
    ),
    inputs: Optional[str] = typer.Option(
        None, "--inputs", metavar="MODULE:NAME",
        help="Property mode: MODULE:NAME of a hypothesis strategy or example list of argument tuples.",
    ),
    max_examples: int = typer.Option(50, "--max-examples", help="Property mode: inputs to draw."),
    devices: str = typer.Option("8", "--devices", metavar="N,N...", help="Comma-separated device counts."),
    processes: int = typer.Option(
        1, "--processes", min=1,
        help="Run each side as P processes on localhost (jax.distributed, gloo), each with "
             "devices / P devices, and compare process by process.",
    ),
    reference_python: Optional[str] = typer.Option(
        None, "--reference-python", metavar="PYTHON",
        help="Interpreter for the original (e.g. a jax 0.4.38 venv).",
    ),
    report_json: Optional[Path] = typer.Option(None, "--report-json", metavar="FILE"),
    junit: Optional[Path] = typer.Option(None, "--junit", metavar="FILE"),
    timeout: float = typer.Option(
        300.0, "--timeout", metavar="S",
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
    platform: str = typer.Option(
        "cpu", "--platform", metavar="NAME",
        help="Where entries run: cpu (N fake devices) or an accelerator's real devices, "
             "e.g. tpu, whose count --devices must give.",
    ),
    target_jax: str = TargetOpt,
    style: Optional[Style] = StyleOpt,
) -> None:
    """Run original and migrated entries on N fake CPU devices and compare them.

    With --style global, outputs are compared through the migration's layout map."""
    migration = _options(paths[:1], target_jax, style=style)
    raise typer.Exit(run_check(
        paths, entry, function, inputs, max_examples, devices, processes, reference_python,
        report_json, junit, timeout, rng_compat, repeat, migration, platform,
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
    # Ctrl-C and SIGTERM (CI cancellation, timeout) unwind as `Interrupted`: a write in
    # progress removes its temporary file, the file being replaced is never half-written, and
    # the worker processes are stopped (migrator/interrupts.py).
    install_handlers()
    try:
        app()
    except Interrupted:
        typer.echo("pmap-migrate: interrupted", err=True)
        _exit_without_teardown(EXIT_INTERRUPTED)
    except SystemExit as done:
        if _finished_run and isinstance(done.code, (int, type(None))):
            _exit_without_teardown(done.code or 0)
        raise
    except Exception as error:  # noqa: BLE001 - a crash is a tool error, exit 2
        typer.echo(f"pmap-migrate: internal error: {error!r}", err=True)
        raise SystemExit(report.EXIT_ERROR)


if __name__ == "__main__":
    main()
