"""Project configuration: `[tool.pmap-migrate]` in the nearest pyproject.toml.

    [tool.pmap-migrate]
    include = ["*.py", "*.ipynb"]          # which files are candidates
    exclude = [".git", ".venv", ...]       # replaces the default exclusions
    extend-exclude = ["corpus/legacy"]     # adds to them (or to `exclude`)
    respect-gitignore = true               # skip what .gitignore files ignore
    helper-module = "mypkg._pmap_helpers"  # helpers written once there, and imported
    target-jax = "auto"                    # "0.10", "0.4.38", ... or "auto"
    select = ["PM"]                        # finding codes or code prefixes to report
    ignore = ["PM304"]
    [tool.pmap-migrate.per-path."tests/**"]
    ignore = ["PM2"]
    target-jax = "0.4.38"

The file is the nearest pyproject.toml at or above the first path given; the search stops at
a filesystem root or after a directory that contains `.git`. Without one, every setting has
its default and the configuration directory is the current directory.

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

`respect-gitignore = false` (or `--no-respect-gitignore`) stops discovery from skipping what
the project's `.gitignore` files ignore (see migrator/gitignore.py). `helper-module =
"pkg.mod"` writes the faithful helpers into that module and imports them (`--helper-module`).

`select` / `ignore` resolve like ruff's: for each code, the longest matching prefix decides
and `ignore` wins a tie. The global pair is the first layer, where a code that no `select`
prefix matches is off. Each `per-path` entry that matches is one more layer, in file order,
and decides only the codes its own prefixes match; the others keep the decision made so
far. So a per-path `ignore = ["PM2"]` adds to the global ignores, a per-path
`select = ["PM304"]` re-enables a code ignored globally, and `select = ["PM3"]` together
with `ignore = ["PM"]` keeps only PM3xx there. Error-severity codes are always kept.

`target-jax = "auto"` reads the `jax` requirement of the project (migrator/jax_requirement.py).
`override_target` (the CLI's `--target-jax`) replaces every target in the file, the
per-path ones included.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import keyword
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Iterable

import pathspec

from migrator.config_error import ConfigError
from migrator.files import SKIPPED_DIRS
from migrator.jax_requirement import detect_target
from transforms.codes.rules import all_rules
from transforms.target import NEWEST, TargetJax

TABLE = "tool.pmap-migrate"
AUTO = "auto"
DEFAULT_INCLUDE: tuple[str, ...] = ("*.py", "*.ipynb")
# The directories the file walker skips, plus the egg-info directories it skips by suffix.
DEFAULT_EXCLUDE: tuple[str, ...] = (*sorted(SKIPPED_DIRS), "*.egg-info")
DEFAULT_SELECT: tuple[str, ...] = ("PM",)

_KEYS = (
    "include", "exclude", "extend-exclude", "respect-gitignore", "target-jax", "helper-module",
    "select", "ignore", "per-path", "style",
)
STYLES = ("faithful", "global")
_PER_PATH_KEYS = ("select", "ignore", "target-jax")


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


# --------------------------------------------------------------------------------------
# Loading


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start`, stopping after a directory holding
    `.git` (a directory or, in worktrees and submodules, a file) or at the root."""
    start = Path(os.path.abspath(start))
    here = start if start.is_dir() else start.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if (directory / ".git").exists():
            return None
    return None


def load_config(
    paths: list[Path], *, override_target: str | None = None, override_style: str | None = None
) -> Config:
    """The configuration for a run over `paths`; `override_target` (the CLI flag) wins
    over every `target-jax` in the file."""
    source = find_pyproject(paths[0] if paths else Path.cwd())
    if source is None:
        root, document, table = Path(os.path.abspath(Path.cwd())), {}, {}
    else:
        root = source.parent
        document = _read_toml(source)
        table = _tool_table(document, source)
    reader = _Reader(source, root, document)
    # With the flag given, the file's targets are checked but "auto" there is not resolved.
    reader.resolve_auto = override_target is None
    settings = reader.settings(table)
    if override_target is not None:
        reader.resolve_auto = True
        settings["target_jax"] = reader.target(override_target, "--target-jax", flag=True)
        settings["target_forced"] = True
    if override_style is not None:
        settings["style"] = reader.style(override_style)
    return Config(root=root, source=source, **settings)


def _read_toml(source: Path) -> dict:
    try:
        with source.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{source}: cannot be read: {error.strerror or error}") from None


def _tool_table(document: dict, source: Path) -> dict:
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{source}: `tool` must be a table")
    if "pmap_migrate" in tool:
        raise ConfigError(f"{source}: [tool.pmap_migrate] is not read; the table is [{TABLE}]")
    table = tool.get("pmap-migrate", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [{TABLE}] must be a table, not {_kind(table)}")
    return table


class _Reader:
    """Validates one `[tool.pmap-migrate]` table; every error names the file and the key."""

    def __init__(self, source: Path | None, root: Path, document: dict):
        self.source, self.root, self.document = source, root, document
        self._auto: str | None = None
        self.resolve_auto = True

    def fail(self, key: str, problem: str, flag: bool = False) -> ConfigError:
        if flag:
            return ConfigError(f"{key}: {problem}")
        where = f"{self.source}: " if self.source else ""
        return ConfigError(f"{where}[{TABLE}] {key}: {problem}")

    def settings(self, table: dict) -> dict[str, Any]:
        self.check_keys(table, _KEYS, "")
        include = self.globs(table, "include", DEFAULT_INCLUDE)
        exclude = self.globs(table, "exclude", DEFAULT_EXCLUDE)
        exclude += self.globs(table, "extend-exclude", ())
        settings: dict[str, Any] = {
            "include": Patterns.compile(include),
            "exclude": Patterns.compile(exclude),
            "respect_gitignore": self.boolean(table, "respect-gitignore", True),
            "helper_module": self.dotted_name(table, "helper-module"),
            "target_jax": self.target(table.get("target-jax", NEWEST), "target-jax"),
            "select": self.codes(table, "select", DEFAULT_SELECT),
            "ignore": self.codes(table, "ignore", ()),
            "per_path": self.per_path(table.get("per-path", {})),
            "style": self.style(table.get("style", "faithful")),
        }
        return settings

    def style(self, value) -> str:
        if value not in STYLES:
            raise self.fail("style", f"must be one of {', '.join(STYLES)}, not {value!r}")
        return value

    def check_keys(self, table: dict, known: tuple[str, ...], prefix: str) -> None:
        for key in table:
            if key not in known:
                hint = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise self.fail(f"{prefix}{key}", f"unknown key{suggestion}; known keys: {', '.join(known)}")

    def strings(self, table: dict, key: str, name: str) -> list[str]:
        value = table[key]
        if not isinstance(value, list):
            raise self.fail(name, f"must be a list of strings, not {_kind(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.fail(f"{name}[{index}]", f"must be a non-empty string, not {item!r}")
        return value

    def globs(self, table: dict, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        texts = self.strings(table, key, key) if key in table else list(default)
        for text in texts:
            try:
                Patterns.compile([text])
            except ValueError as error:  # pathspec's errors are ValueErrors too
                raise self.fail(key, str(error)) from None
        return tuple(texts)

    def boolean(self, table: dict, key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, not {_kind(value)}")
        return value

    def dotted_name(self, table: dict, key: str) -> str | None:
        if key not in table:
            return None
        value = table[key]
        if not isinstance(value, str) or not is_dotted_name(value):
            raise self.fail(key, f"must be a dotted module name such as \"mypkg._pmap_helpers\", not {value!r}")
        return value.strip()

    def codes(self, table: dict, key: str, default: tuple[str, ...], prefix: str = "") -> tuple[str, ...]:
        if key not in table:
            return default
        name = prefix + key
        known = all_rules()
        out = []
        for index, item in enumerate(self.strings(table, key, name)):
            code = item.strip().upper()
            if not re.fullmatch(r"PM\d{0,3}", code) or not any(c.startswith(code) for c in known):
                raise self.fail(
                    f"{name}[{index}]",
                    f"{item!r} is not a finding code or a prefix of one (e.g. PM304, PM3, PM)",
                )
            out.append(code)
        return tuple(out)

    def target(self, value: Any, name: str, flag: bool = False) -> str:
        if isinstance(value, float):
            raise self.fail(
                name, f"must be a quoted string such as \"0.10\" (unquoted, TOML reads a number: {value})"
            )
        if not isinstance(value, str):
            raise self.fail(
                name, f"must be a string such as \"0.10\", \"0.4.38\" or \"auto\", not {_kind(value)}"
            )
        if value.strip().lower() == AUTO:
            if not self.resolve_auto:
                return AUTO  # overridden by the flag: never used
            if self._auto is None:
                self._auto = detect_target(self.root, self.document, self.source)
            return self._auto
        try:
            TargetJax.parse(value)
        except ValueError as error:
            raise self.fail(name, f"{error}, or \"auto\"", flag) from None
        return value.strip()

    def per_path(self, value: Any) -> tuple[PathRule, ...]:
        if not isinstance(value, dict):
            raise self.fail("per-path", f"must be a table of glob = {{ ... }}, not {_kind(value)}")
        rules = []
        for pattern, entry in value.items():
            name = f'per-path."{pattern}"'
            if not isinstance(entry, dict):
                raise self.fail(
                    name, f"must be a table with select / ignore / target-jax, not {_kind(entry)}"
                )
            self.check_keys(entry, _PER_PATH_KEYS, name + ".")
            try:
                compiled = Patterns.compile([pattern])
            except ValueError as error:
                raise self.fail(name, str(error)) from None
            rules.append(PathRule(
                pattern=compiled,
                select=self.codes(entry, "select", None, name + "."),
                ignore=self.codes(entry, "ignore", None, name + "."),
                target_jax=(
                    self.target(entry["target-jax"], name + ".target-jax") if "target-jax" in entry else None
                ),
            ))
        return tuple(rules)


def _kind(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a float"}.get(type(value), type(value).__name__)
