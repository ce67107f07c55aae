"""`--helper-module pkg.mod`: the faithful helpers written once, into the user's project.

Without it every migrated module carries its own copy of the helpers it calls. With it each
migrated module imports them (`from pkg.mod import _pmap_style_shard_map`, absolute) and this
module writes their code once into `pkg/mod.py`, with the same marker comment.

Where the module goes: `pkg.mod` is looked up under an import root, the directory a Python
process importing the project has on sys.path: the parent of the top package of each path
given (the top of its `__init__.py` chain), then the project root (the pyproject.toml's
directory) and its `src/`. The first root holding the package directory `pkg/` (for a
top-level `mod`, the first root) decides. Before anything is processed, it is an error when
the module would lie outside the paths given, when its package does not exist, or when an
existing `pkg/mod.py` is not a file. After processing and before anything is written, it is
an error when a file that needs the helpers could not import them: its own import root (the
parent of its top package; a file outside any package has its own directory) is not the
module's.

The module's text: a new module gets a short docstring and the helpers the run needs, in
`HELPER_ORDER`, after the global style's contract functions (`_per_device_shard_map` and the
functions it uses, with their imports) when a migrated file calls them. An existing one keeps what it has, and gets the missing helpers appended, so a
second run writes nothing. Which helpers a run needs is read from the migrated files' own
`from pkg.mod import ...` lines, so `apply --interactive` writes only what accepted hunks use.
Notebooks keep their own copy of the helpers (a notebook often runs where the project's
package is not importable, such as a hosted kernel).
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

from migrator.config import Config, is_dotted_name
from transforms.helpers.helper_templates import helper_text
from transforms.target import TargetJax

DOCSTRING = (
    '"""Helpers written by pmap-migrate: jax.pmap\'s calling contract on jax.jit + '
    "jax.shard_map.\n\nPlain public JAX, safe to keep and to edit. The migrated modules of "
    'this project import them\n(`--helper-module`); a later run only appends helpers that '
    'are missing.\n"""\n'
)


class HelperModuleError(ValueError):
    """A helper module that cannot be used; the message says why, naming the paths."""


@dataclasses.dataclass(frozen=True)
class HelperModule:
    name: str  # dotted, as given
    path: Path  # the module's file (absolute), which may not exist yet
    import_root: Path  # the directory on sys.path the module is imported from

    @classmethod
    def resolve(cls, name: str, paths: list[Path], config: Config) -> HelperModule:
        """Where `name` lives for a run over `paths`; HelperModuleError when it cannot be
        written there (see the module docstring)."""
        if not is_dotted_name(name):
            raise HelperModuleError(
                f"{name!r} is not a dotted module name (e.g. mypkg._pmap_helpers)")
        parts = name.strip().split(".")
        given = [Path(os.path.abspath(p)) for p in paths]
        roots = [import_root(p if p.is_dir() else p.parent) for p in given]
        roots += [config.root, config.root / "src"]
        roots = list(dict.fromkeys(roots))
        package = Path(*parts[:-1]) if len(parts) > 1 else Path()
        root = next((r for r in roots if (r / package).is_dir()), None)
        if root is None:
            tried = ", ".join(_show(r / package) for r in roots)
            raise HelperModuleError(
                f"{name}: package {'.'.join(parts[:-1])} not found (looked for {tried}); "
                "the helper module goes into an existing package"
            )
        path = root / package / f"{parts[-1]}.py"
        if not any(path == p or path.is_relative_to(p) for p in given if p.is_dir() or p == path):
            raise HelperModuleError(
                f"{name} would be written to {_show(path)}, which is not under the paths given "
                f"({', '.join(_show(p) for p in given)})"
            )
        if path.exists() and not path.is_file():
            raise HelperModuleError(f"{name}: {_show(path)} exists and is not a file")
        if (root / package / parts[-1]).is_dir():
            raise HelperModuleError(
                f"{name}: {_show(root / package / parts[-1])} is a package, not a module")
        for depth in range(1, len(parts)):
            directory = root.joinpath(*parts[:depth])
            if not (directory / "__init__.py").is_file():
                raise HelperModuleError(
                    f"{name}: {_show(directory)} has no __init__.py, so the migrated files' "
                    f"`from {name} import ...` would depend on how they are run"
                )
        return cls(name=name.strip(), path=path, import_root=root)

    def is_this(self, file: Path) -> bool:
        return Path(os.path.abspath(file)) == self.path

    def cannot_import(self, file: Path) -> str | None:
        """Why `file` could not import this module with an absolute import, or None."""
        own = import_root(Path(os.path.abspath(file)).parent)
        if own == self.import_root:
            return None
        return (
            f"cannot import {self.name}: the file is imported from {_show(own)}, the helper "
            f"module from {_show(self.import_root)} (choose a helper module in the file's "
            "package, or leave --helper-module out)"
        )

    def imported_names(self, source: bytes) -> set[str]:
        """The helper names a migrated file imports from this module."""
        from transforms.global_view.contract_text import CONTRACT_NAMES
        from transforms.module_helpers import HELPER_NAMES  # (it imports libcst: see _order)

        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return set()
        return {
            alias.name for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == self.name
            for alias in node.names if alias.name in HELPER_NAMES or alias.name in CONTRACT_NAMES
        }

    def updated_text(self, needed: dict[str, TargetJax]) -> tuple[bytes, bytes | None]:
        """(current bytes, new bytes or None when nothing changes) for helpers `needed`
        (name -> the target its first user is written for). The global style's contract
        functions (`_per_device_shard_map`, ...) are one block, with its imports, written first."""
        from transforms.global_view.contract_text import CONTRACT_NAMES, contract_module_text

        current = self.path.read_bytes() if self.path.is_file() else b""
        text = current.decode("utf-8")
        defined = _defined_functions(text, self.path)
        contract = any(n in needed for n in CONTRACT_NAMES) and not defined & set(CONTRACT_NAMES)
        missing = [n for n in _order() if n in needed and n not in defined]
        if "_pmap_compat" in missing and "_pmap_style_shard_map" not in defined | set(missing):
            missing.insert(0, "_pmap_style_shard_map")  # the drop-in calls it
            needed = {**needed, "_pmap_style_shard_map": needed["_pmap_compat"]}
        if not missing and not contract:
            return current, None
        newline = "\r\n" if "\r\n" in text else "\n"
        pieces = [text.replace("\r\n", "\n").rstrip("\n") + "\n" if text.strip() else DOCSTRING]
        if contract:
            pieces.append(("\n" if not text.strip() else "\n\n") + contract_module_text())
        pieces += ["\n\n" + helper_text(name, needed[name]) for name in missing]
        new = "".join(pieces).replace("\n", newline).encode("utf-8")
        ast.parse(new)  # refuse to write a module that does not parse
        return current, new


    def defined_names(self, text: bytes) -> set[str]:
        """The functions module text `text` defines at its top level."""
        return _defined_functions(text.decode("utf-8"), self.path)


def written_text(name: str, target: TargetJax) -> str:
    """What the helper module holds for `name`: its helper for `target`, or for a contract
    function the contract functions' block (the same for every target the global style has)."""
    from transforms.global_view.contract_text import CONTRACT_NAMES, contract_module_text

    return contract_module_text() if name in CONTRACT_NAMES else helper_text(name, target)


def import_root(directory: Path) -> Path:
    """The directory a process has on sys.path to import modules of `directory`: the parent
    of its top package (the top of the `__init__.py` chain), or `directory` itself."""
    directory = Path(os.path.abspath(directory))
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        directory = directory.parent
    return directory


def _defined_functions(text: str, path: Path) -> set[str]:
    if not text.strip():
        return set()
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise HelperModuleError(
            f"{_show(path)}:{error.lineno}: does not parse: {error.msg}") from None
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def _show(path: Path) -> str:
    try:
        return Path(path).relative_to(Path.cwd()).as_posix() or "."
    except ValueError:
        return Path(path).as_posix()


def _order() -> tuple[str, ...]:
    """The helpers in the order they are written. Imported when needed: transforms.module_helpers
    imports libcst and libcst.codemod, which a run over files without references never loads."""
    from transforms.module_helpers import HELPER_ORDER

    return HELPER_ORDER
