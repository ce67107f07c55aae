"""Finding the Python files to migrate, deterministically and without leaving the tree."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterator

from migrator.gitignore import GitIgnore
from transforms.codes import Code
from transforms.codes.findings import Finding

SKIPPED_DIRS = {
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "build", "dist",
    "node_modules", "site-packages", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache",
}


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """A file to process: where it is, the root it was found under, how to name it."""

    path: Path
    root: Path  # the directory relative paths (diff headers, --out-dir) are taken from
    display: str
    problem: Finding | None = None  # set when the path cannot be processed

    @property
    def relative(self) -> Path:
        return self.path.relative_to(self.root)


def display_name(path: Path) -> str:
    try:
        return path.absolute().relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.absolute().as_posix()


SOURCE_SUFFIXES = (".py", ".ipynb")


def discover(paths: list[Path], config=None, respect_gitignore: bool | None = None) -> Iterator[SourceFile]:
    """Every .py / .ipynb file under `paths` (the configuration's include and exclude
    globs when given), sorted, each once, leaving out what the project's .gitignore files
    ignore (unless `respect_gitignore`, by default the configuration's, is off). Files named
    on the command line are always taken. Symlinks are never followed out of the tree."""
    if respect_gitignore is None:
        respect_gitignore = config is None or config.respect_gitignore
    seen: set[Path] = set()
    for given in paths:
        given = Path(os.path.abspath(given))
        if given.is_dir() and not given.is_symlink():
            yield from _walk(given, seen, config, respect_gitignore)
        else:
            yield from _single(given, given.parent, seen)


def _walk(root: Path, seen: set[Path], config, respect_gitignore: bool) -> Iterator[SourceFile]:
    gitignore = GitIgnore(root) if respect_gitignore else None
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        if config is None:
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            )
        else:
            dirnames[:] = sorted(d for d in dirnames if not config.excluded_dir(here / d))
        if gitignore is not None:
            dirnames[:] = [d for d in dirnames if not gitignore.ignored(here / d, is_dir=True)]
        for name in sorted(filenames):
            path = here / name
            wanted = config.is_included(path) if config else name.endswith(SOURCE_SUFFIXES)
            if wanted and gitignore is not None and gitignore.ignored(path):
                continue
            if wanted:
                yield from _single(path, root, seen, inside=root)
        for name in dirnames:
            if (here / name).is_symlink():
                yield _problem(here / name, root, Code.SYMLINK_NOT_FOLLOWED,
                               "symlinked directory not followed")


def _single(path: Path, root: Path, seen: set[Path], inside: Path | None = None):
    if path.is_symlink():
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError) as error:
            yield _problem(path, root, Code.UNREADABLE,
                           f"broken or looping symlink ({error.__class__.__name__})")
            return
        if inside is not None:
            # Inside a walked tree a link is never written through: its target is either
            # processed where it lives, or lies outside the paths given.
            where = "outside the tree" if not target.is_relative_to(inside) else "inside the tree"
            yield _problem(path, root, Code.SYMLINK_NOT_FOLLOWED,
                           f"symlink to {where} ({display_name(target)}), not followed")
            return
        path = target
    if not path.exists():
        yield _problem(path, root, Code.UNREADABLE, "no such file or directory")
        return
    if not path.is_file():  # a FIFO or device named *.py would block or never end
        yield _problem(path, root, Code.UNREADABLE, "not a regular file")
        return
    real = path.resolve()
    if real in seen:
        return
    seen.add(real)
    yield SourceFile(path=path, root=root, display=display_name(path))


def _problem(path: Path, root: Path, code: str, message: str) -> SourceFile:
    finding = Finding(code=code, line=1, col=1, message=message, path=display_name(path))
    return SourceFile(path=path, root=root, display=display_name(path), problem=finding)
