"""What a project's `.gitignore` files ignore, so discovery skips it as ruff and black do.

Git's rules, read with pathspec: each directory's `.gitignore` applies below it, with paths
relative to that directory; the deepest file with a matching pattern decides (so `!keep.py`
in a subdirectory re-includes what a parent ignored); the repository's `.git/info/exclude`
comes last. A directory that is ignored is not entered, so nothing below it comes back, as in
git. The repository is the nearest directory at or above the walked one that holds `.git`;
outside a repository, the `.gitignore` files of the walked tree itself apply. The user's
global excludes file (core.excludesFile) is not read.
"""

from __future__ import annotations

from pathlib import Path

import pathspec


class GitIgnore:
    """The ignore rules in force under `root`; `ignored()` answers for paths below it."""

    def __init__(self, root: Path):
        root = Path(root).absolute()
        self.top = next((d for d in (root, *root.parents) if (d / ".git").exists()), root)
        self._specs: dict[Path, pathspec.PathSpec | None] = {}

    def ignored(self, path: Path, is_dir: bool = False) -> bool:
        path = Path(path).absolute()
        try:
            path.relative_to(self.top)
        except ValueError:
            return False
        for directory in path.parents:
            spec = self._spec(directory)
            if spec is not None:
                relative = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
                decision = spec.check_file(relative).include
                if decision is not None:
                    return decision
            if directory == self.top:
                break
        exclude = self._read(self.top / ".git" / "info" / "exclude", self.top / ".git/info")
        if exclude is not None:
            relative = path.relative_to(self.top).as_posix() + ("/" if is_dir else "")
            return bool(exclude.check_file(relative).include)
        return False

    def _spec(self, directory: Path) -> pathspec.PathSpec | None:
        return self._read(directory / ".gitignore", directory)

    def _read(self, file: Path, key: Path) -> pathspec.PathSpec | None:
        if key not in self._specs:
            try:
                lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:  # absent (the usual case), a directory, unreadable: no rules
                lines = []
            self._specs[key] = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[key]
