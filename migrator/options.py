"""What a run migrates with: one `MigrationOptions`, built once from the configuration and the
command-line flags (`from_config`), then passed unchanged to every file, `.py` or notebook, and
to `check`'s migration.

Per-path settings (`[tool.pmap-migrate.per-path."glob"]` target-jax, select / ignore) are
resolved for one file by `for_file`, the only place that reads them: it gives the same type with
the target, the ignored codes and the helper module that apply there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from migrator.config import STYLES, Config
from migrator.files import SourceFile, discover
from transforms.codes.rules import all_rules
from transforms.target import DEFAULT_TARGET, TargetJax


@dataclasses.dataclass(frozen=True)
class MigrationOptions:
    """How files are migrated. The run's options (`from_config`) hold the configuration's
    global settings; `for_file` gives those that apply at one path."""

    style: str = "faithful"  # "faithful" | "global" (transforms/global_view)
    target: TargetJax = DEFAULT_TARGET  # the JAX version the output is written for
    ignored: frozenset[str] = frozenset()  # finding codes turned off (ignoring PM100: not migrated)
    helper_module: str | None = None  # dotted module the helpers are imported from
    respect_gitignore: bool = True  # discovery skips what the project's .gitignore files ignore
    # The configuration the per-path settings and the discovery globs come from; None: defaults.
    config: Config | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}, not {self.style!r}")

    @classmethod
    def from_config(cls, config: Config, **overrides) -> MigrationOptions:
        """The options of a run under `config` (flags already applied to it); `overrides`
        replace fields (check's copy, for one, carries its own helpers)."""
        options = cls(
            style=config.style,
            target=TargetJax.parse(config.target_jax),
            ignored=_ignored(config, None),
            helper_module=config.helper_module,
            respect_gitignore=config.respect_gitignore,
            config=config,
        )
        return dataclasses.replace(options, **overrides)

    def discover(self, paths: list[Path]) -> Iterator[SourceFile]:
        """The files of a run over `paths` (migrator/files.py), with the configuration's globs."""
        return discover(paths, self.config, self.respect_gitignore)

    def for_file(self, path: Path) -> MigrationOptions:
        """The options at `path`: the configuration's per-path target and codes, and the helper
        module (none in the helper module itself, and none in a notebook: a notebook keeps its
        own copy of the helpers, as it often runs where the package is not importable)."""
        options = self
        if self.config is not None:
            options = dataclasses.replace(
                options,
                target=TargetJax.parse(self.config.target_for(path)),
                ignored=_ignored(self.config, path),
            )
        helper_module = None if path.suffix == ".ipynb" else _helper_module_for(path, self.helper_module)
        return dataclasses.replace(options, helper_module=helper_module)


    def fixed_at(self, path: Path) -> MigrationOptions:
        """The options at `path` for a source that is not read from there (standard input
        named by --stdin-filename), resolved once: `for_file` on its temporary copy keeps them.
        No helper module: the helpers go into the output, which must run as it is."""
        return dataclasses.replace(self.for_file(path), config=None, helper_module=None)


def _ignored(config: Config, path: Path | None) -> frozenset[str]:
    """The codes `config` turns off at `path` (None: the global select / ignore only)."""
    return frozenset(code for code in all_rules() if not config.keeps(path, code))


def _helper_module_for(path: Path, helper_module: str | None) -> str | None:
    """The module `path` imports the helpers from: none for the helper module itself."""
    if helper_module is None:
        return None
    parts = helper_module.split(".")
    own = (*path.parent.parts[len(path.parent.parts) - len(parts) + 1:], path.stem)
    return None if list(own) == parts else helper_module
