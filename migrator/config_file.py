"""The configuration file: `[tool.pmap-migrate]` in the nearest pyproject.toml, found, read
and validated into a `Config` (migrator/config.py says what the settings decide).

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

`respect-gitignore = false` (or `--no-respect-gitignore`) stops discovery from skipping what
the project's `.gitignore` files ignore (see migrator/gitignore.py). `helper-module =
"pkg.mod"` writes the faithful helpers into that module and imports them (`--helper-module`).

`target-jax = "auto"` reads the `jax` requirement of the project (migrator/jax_requirement.py).
`override_target` (the CLI's `--target-jax`) replaces every target in the file, the
per-path ones included.

The command line's selection flags act as ruff's do (`CommandLine`): `--select` replaces the
file's global `select`, `--ignore` adds to its global `ignore`, `--exclude` replaces its
`exclude` (the defaults included) and `--extend-exclude` adds to it. The `per-path` entries
still apply on top.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from migrator.config import (
    DEFAULT_EXCLUDE,
    DEFAULT_INCLUDE,
    DEFAULT_SELECT,
    STYLES,
    Config,
    PathRule,
    Patterns,
    is_dotted_name,
)
from migrator.config_error import ConfigError
from migrator.jax_requirement import detect_target
from transforms.codes.rules import all_rules
from transforms.target import NEWEST, TargetJax

TABLE = "tool.pmap-migrate"
AUTO = "auto"

_KEYS = (
    "include", "exclude", "extend-exclude", "respect-gitignore", "target-jax", "helper-module",
    "select", "ignore", "per-path", "style",
)
_PER_PATH_KEYS = ("select", "ignore", "target-jax")


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


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """What the command line says about the selection: None (or empty) leaves the file's."""

    select: tuple[str, ...] | None = None  # replaces the global `select`
    ignore: tuple[str, ...] = ()  # added to the global `ignore`
    exclude: tuple[str, ...] | None = None  # replaces `exclude` (and its defaults)
    extend_exclude: tuple[str, ...] = ()  # added to the exclusions

    def apply(self, settings: dict[str, Any]) -> None:
        if self.select is not None:
            settings["select"] = self.select
        settings["ignore"] = (*settings["ignore"], *self.ignore)
        if self.exclude is not None or self.extend_exclude:
            exclude = settings["exclude"].texts if self.exclude is None else self.exclude
            settings["exclude"] = Patterns.compile((*exclude, *self.extend_exclude))


def parse_code(text: str) -> str:
    """A finding code or a prefix of one (`PM304`, `pm3`, `PM`), upper-cased; ValueError if not."""
    code = text.strip().upper()
    if not re.fullmatch(r"PM\d{0,3}", code) or not any(c.startswith(code) for c in all_rules()):
        raise ValueError(f"{text!r} is not a finding code or a prefix of one (e.g. PM304, PM3, PM)")
    return code


def check_glob(text: str) -> str:
    """A glob as `exclude` takes it; ValueError if it is not one."""
    Patterns.compile([text])  # pathspec's errors are ValueErrors too
    return text


def load_config(
    paths: list[Path], *, override_target: str | None = None, override_style: str | None = None,
    command_line: CommandLine = CommandLine(),
) -> Config:
    """The configuration for a run over `paths`; `override_target` (the CLI flag) wins
    over every `target-jax` in the file, `command_line` changes the selection."""
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
    command_line.apply(settings)
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
                check_glob(text)
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
        out = []
        for index, item in enumerate(self.strings(table, key, name)):
            try:
                out.append(parse_code(item))
            except ValueError as error:
                raise self.fail(f"{name}[{index}]", str(error)) from None
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
