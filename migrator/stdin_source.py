"""`-` for a path: the source comes from standard input (editors, pipes), as ruff reads it.

`--stdin-filename PATH` names it: the configuration is looked up from there, the per-path
settings that match it apply, a `.ipynb` name makes it a notebook, and findings and diff
headers carry that name. The source is written to a temporary file of the same name, since
the pipeline reads files; the user's file at PATH, if any, is never read or written.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from migrator.files import SourceFile, display_name
from migrator.options import MigrationOptions
from migrator.runner import FileResult, process

STDIN = Path("-")
DEFAULT_NAME = "stdin.py"


def reads_stdin(paths: list[Path]) -> bool:
    return STDIN in paths


def config_paths(stdin_filename: Path | None) -> list[Path]:
    """Where the configuration of a standard-input run is looked up from."""
    return [stdin_filename if stdin_filename is not None else Path.cwd() / DEFAULT_NAME]


def process_stdin(data: bytes, stdin_filename: Path | None, options: MigrationOptions) -> FileResult:
    """Migrate `data` as the file `stdin_filename` (default: stdin.py in the current directory)."""
    named = stdin_filename if stdin_filename is not None else Path(DEFAULT_NAME)
    display = display_name(named) if stdin_filename is not None else "-"
    fixed = options.fixed_at(Path.cwd() / named if not named.is_absolute() else named)
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-stdin-") as folder:
        copy = Path(folder) / (named.name or DEFAULT_NAME)
        copy.write_bytes(data)
        source = SourceFile(path=copy, root=Path(folder), display=display)
        return process(source, fixed)
