"""The `pmap-migrate` command line: diff, apply, scan, check.

Exit codes are the same for every command: 0 nothing to do, 1 changes pending or something
needs a human (or an equivalence mismatch), 2 a tool error. A bad file never stops a run.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import List, Optional

import typer

from migrator import report
from migrator.diffing import unified_diff
from migrator.runner import copy_other_files, process_all, write_result
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


def _target(text: str) -> TargetJax:
    try:
        return TargetJax.parse(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--target-jax") from None


@app.command()
def diff(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    context: int = typer.Option(3, "--context", "-U", help="Lines of context in the diff."),
) -> None:
    """Dry run: print a unified diff (git apply / patch -p1) and the findings on stderr."""
    results = list(process_all(paths, _target(target_jax)))
    for result in results:
        if result.changed:
            text = unified_diff(
                result.original.decode(result.encoding),
                result.migrated.decode(result.encoding),
                result.file.display,
                context,
            )
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode(result.encoding))
            sys.stdout.buffer.flush()
    report.write_text(results, sys.stderr)
    typer.echo(report.summary_line(results, "would change"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


@app.command()
def apply(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", help="Write the migrated tree here (other files copied) instead of in place."
    ),
) -> None:
    """Rewrite files in place (atomically), or into --out-dir."""
    results = list(process_all(paths, _target(target_jax)))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_other_files(paths, out_dir)
    for result in results:
        write_result(result, out_dir)
    report.write_text(results, sys.stderr)
    typer.echo(report.summary_line(results, "changed"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=False))


@app.command()
def scan(
    paths: List[Path] = PathsArg,
    target_jax: str = TargetOpt,
    format: Format = typer.Option(Format.text, "--format", help="text or json."),
) -> None:
    """Inventory: list every pmap site and finding, change nothing."""
    results = list(process_all(paths, _target(target_jax)))
    if format is Format.json:
        report.write_json(results, sys.stdout)
    else:
        report.write_text(results, sys.stdout)
        typer.echo(report.summary_line(results, "would change"), err=True)
    raise typer.Exit(report.exit_code(results, pending_counts=True))


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
