"""Create the reference environment: a virtualenv with the legacy pmap (jax 0.4.38).

Original programs run there, where jax.pmap, device_put_replicated and friends still have
their old behaviour. `python -m equivalence.legacy_env [PATH]` (default .venv-jax-legacy);
it does nothing when the environment is already there and works.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

LEGACY_JAX = "0.4.38"
REQUIREMENTS = [f"jax[cpu]=={LEGACY_JAX}", "numpy>=1.26,<2.3"]
DEFAULT_PATH = Path(".venv-jax-legacy")


def python_of(path: Path) -> Path:
    return path / "bin" / "python"


def works(path: Path) -> bool:
    python = python_of(path)
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import jax; print(jax.__version__)"], capture_output=True, text=True
    )
    return probe.returncode == 0 and probe.stdout.strip() == LEGACY_JAX


def ensure(path: Path = DEFAULT_PATH) -> Path:
    if not works(path):
        venv.create(path, with_pip=True, clear=True)
        subprocess.run(
            [str(python_of(path)), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True
        )
    return python_of(path)


if __name__ == "__main__":
    print(ensure(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH))
