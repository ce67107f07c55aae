"""Shared test helpers. JAX is never imported here: programs run in subprocesses."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LEGACY_PYTHON = os.environ.get(
    "PMAP_MIGRATE_LEGACY_PYTHON", str(ROOT / ".venv-jax-legacy" / "bin" / "python")
)


def skip_unless_ci(missing: str) -> None:
    """A test whose dependency is `missing`: skipped on a developer's machine, failed under
    the CI environment variable, where a silent skip would hide that the test never ran."""
    if os.environ.get("CI"):
        pytest.fail(f"CI needs {missing}")
    pytest.skip(f"needs {missing}", allow_module_level=True)


def require(module: str, why: str):
    """`module`, imported; a missing one skips the test (fails it under CI: skip_unless_ci)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        skip_unless_ci(f"the {module} package ({why})")


def legacy_python_or_skip() -> str:
    if not shutil.which(LEGACY_PYTHON) and not Path(LEGACY_PYTHON).exists():
        skip_unless_ci(f"the legacy JAX interpreter at {LEGACY_PYTHON}")
    return LEGACY_PYTHON


def fixture_cases() -> list[Path]:
    return sorted(p for p in FIXTURES.iterdir() if (p / "before.py").exists())


# A program whose original uses APIs that current JAX removed (device_put_replicated, ...)
# carries this line: its original runs under the legacy interpreter, its migration under the
# current one, and the two are compared.
LEGACY_ORIGINAL_MARKER = b"# pmap-migrate-test: original needs legacy jax"


def original_python(source: bytes) -> str:
    """The interpreter that runs an original program: this one, or the legacy one."""
    return legacy_python_or_skip() if LEGACY_ORIGINAL_MARKER in source else sys.executable


def is_runnable(source: bytes) -> bool:
    return b"\ndef run(" in source


def imports_flax(source: bytes) -> bool:
    return b"\nfrom flax" in source or b"\nimport flax" in source


def link_flax_or_skip(original: Path, migrated: Path) -> None:
    """Each side's flax (tests/flax_sides.py) importable by the programs in its folder."""
    import flax_sides

    if flax_sides.side("legacy") is None or flax_sides.side("current") is None:
        skip_unless_ci("flax for both sides: python tests/flax_sides.py")
    flax_sides.link_into(original, "legacy")
    flax_sides.link_into(migrated, "current")
