"""Project configuration: what `[tool.pmap-migrate]` decides for each path (`Config`).

Finding, reading and validating the table in the nearest pyproject.toml is
migrator/config_file.py (`load_config`); this module is the configuration once read: which
files are candidates, which JAX each is written for, which findings are kept.

Globs (`include`, `exclude`, `extend-exclude`, `per-path` keys) are gitignore patterns,
matched by pathspec as black matches its own, against paths relative to the configuration
directory with `/` separators:

- `*`, `?` and `[...]` match within one path component; `**` spans any number of directories;
- a glob without a `/` (but a trailing one) matches at any depth (`build`, `*.egg-info`,
  `test_*.py`); a glob with a `/` at its start or middle is anchored at the configuration
  directory (`corpus/legacy`, `/top.py`, `src/**/gen_*.py`); a trailing `/` matches
  directories only; `!glob` re-includes what an earlier glob of the same list excluded;
- a glob that matches a directory applies to everything below it;
- a path outside the configuration directory is matched by its name alone, with the
  globs that have no `/`.

`select` / `ignore` resolve like ruff's: for each code, the longest matching prefix decides
and `ignore` wins a tie. The global pair is the first layer, where a code that no `select`
prefix matches is off. Each `per-path` entry that matches is one more layer, in file order,
and decides only the codes its own prefixes match; the others keep the decision made so
far. So a per-path `ignore = ["PM2"]` adds to the global ignores, a per-path
`select = ["PM304"]` re-enables a code ignored globally, and `select = ["PM3"]` together
with `ignore = ["PM"]` keeps only PM3xx there. Error-severity codes are always kept.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import os
from pathlib import Path
from typing import Iterable

import pathspec

from migrator.files import SKIPPED_DIRS
from transforms.codes.rules import all_rules
from transforms.target import NEWEST

DEFAULT_INCLUDE: tuple[str, ...] = ("*.py", "*.ipynb")
# The directories the file walker skips, plus the egg-info directories it skips by suffix.
DEFAULT_EXCLUDE: tuple[str, ...] = (*sorted(SKIPPED_DIRS), "*.egg-info")
DEFAULT_SELECT: tuple[str, ...] = ("PM",)
STYLES = ("faithful", "global")


def is_dotted_name(text: str) -> bool:
    """`pkg.sub.mod`: identifiers joined by dots (a module `--helper-module` can name)."""
    parts = text.strip().split(".")
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


# --------------------------------------------------------------------------------------
# Path patterns


@dataclasses.dataclass(frozen=True)
class Patterns:
    """Globs as written, matched with gitignore semantics by pathspec (as black matches its
    include / exclude): see the module docstring."""

    texts: tuple[str, ...]
    spec: pathspec.PathSpec
    unanchored: pathspec.PathSpec  # the globs without a `/`: for paths outside the root

    @classmethod
    def compile(cls, texts: Iterable[str]) -> "Patterns":
        texts = tuple(texts)
        lines = [_normalise_glob(text) for text in texts]
        unanchored = [line for line in lines if "/" not in line.rstrip("/")]
        return cls(texts, pathspec.GitIgnoreSpec.from_lines(lines),
                   pathspec.GitIgnoreSpec.from_lines(unanchored))

    def match(self, relative: str, inside: bool, is_dir: bool = False) -> bool:
        """Whether `relative` (`/`-separated; the bare name for a path outside the root) or a
        directory above it matches."""
        spec = self.spec if inside else self.unanchored
        return spec.match_file(relative + "/" if is_dir else relative)


def _normalise_glob(text: str) -> str:
    """`\\` is a separator (Windows habits) and `./` means the root, as before pathspec."""
    body = text.replace("\\", "/").strip()
    while body.startswith("./"):
        body = body[2:]
    if not body.strip("/"):
        raise ValueError(f"empty glob {text!r}")
    return body


# --------------------------------------------------------------------------------------
# The configuration


@dataclasses.dataclass(frozen=True)
class PathRule:
    """One `per-path` entry."""

    pattern: Patterns
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    target_jax: str | None = None


@dataclasses.dataclass(frozen=True)
class Config:
    root: Path  # directory of the pyproject.toml (or cwd when none)
    source: Path | None  # the pyproject.toml used
    include: Patterns = Patterns.compile(DEFAULT_INCLUDE)
    exclude: Patterns = Patterns.compile(DEFAULT_EXCLUDE)
    target_jax: str = NEWEST
    select: tuple[str, ...] = DEFAULT_SELECT
    ignore: tuple[str, ...] = ()
    per_path: tuple[PathRule, ...] = ()
    target_forced: bool = False  # set by `override_target`: per-path targets do not apply
    respect_gitignore: bool = True  # discovery skips what the project's .gitignore files ignore
    helper_module: str | None = None  # dotted module the faithful helpers are written to
    style: str = "faithful"  # --style: faithful | global (transforms/global_view)

    def _relative(self, path: Path) -> tuple[str, bool]:
        """The path relative to the root, `/`-separated, and whether it is inside the root."""
        absolute = Path(os.path.abspath(path))
        try:
            return absolute.relative_to(self.root).as_posix(), True
        except ValueError:
            return absolute.name, False

    def _matches(self, patterns: Patterns, path: Path, is_dir: bool = False) -> bool:
        relative, inside = self._relative(path)
        return relative not in ("", ".") and patterns.match(relative, inside, is_dir)

    def is_included(self, path: Path) -> bool:
        """Whether a file is a candidate: an `include` glob matches it, no `exclude` glob
        matches it or a directory above it (up to the configuration directory)."""
        return self._matches(self.include, path) and not self._matches(self.exclude, path)

    def excluded_dir(self, path: Path) -> bool:
        """Whether a walk should prune this directory."""
        return self._matches(self.exclude, path, is_dir=True)

    def _rules_for(self, path: Path) -> list[PathRule]:
        return [rule for rule in self.per_path if self._matches(rule.pattern, path)]

    def target_for(self, path: Path) -> str:
        """The JAX version code at `path` is written for: the last matching per-path
        `target-jax`, else the global one."""
        if not self.target_forced:
            for rule in reversed(self._rules_for(path)):
                if rule.target_jax is not None:
                    return rule.target_jax
        return self.target_jax

    def keeps(self, path: Path | None, code: str) -> bool:
        """Whether a finding with `code` at `path` is reported (None: by the global layer)."""
        if code in _always_kept():
            return True
        keep = _decide(code, self.select, self.ignore)
        keep = bool(keep)  # the global layer: not selected means off
        for rule in self._rules_for(path) if path is not None else ():
            decision = _decide(code, rule.select or (), rule.ignore or ())
            if decision is not None:
                keep = decision
        return keep


def _decide(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool | None:
    """True/False when a prefix matches `code` (the longest wins, `ignore` on a tie)."""
    best_select = max((len(p) for p in select if code.startswith(p)), default=-1)
    best_ignore = max((len(p) for p in ignore if code.startswith(p)), default=-1)
    if best_select < 0 and best_ignore < 0:
        return None
    return best_select > best_ignore


@functools.cache
def _always_kept() -> frozenset[str]:
    return frozenset(code for code, rule in all_rules().items() if rule.severity == "error")
