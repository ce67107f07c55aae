"""flax for the test programs that import it, one copy per side of a check.

The original runs beside the legacy jax 0.4.38 with flax 0.10.2, whose prefetch_to_device
still calls device_put_sharded; the migration runs beside current JAX with flax 0.12.8 (flax
runs on jax 0.10 from 0.12.7, where prefetch_to_device places with a NamedSharding). Each is
installed with `pip install --target --no-deps` into .flax-sides/{legacy,current}: importing
flax needs only these pure packages, and no dependency may move a side's own jax. A test links
a side's packages into that side's program folder, which the worker puts first on sys.path.

`python tests/flax_sides.py` makes both (.ci/run does); it does nothing where they exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIDES = ROOT / ".flax-sides"
FLAX = {"legacy": "flax==0.10.2", "current": "flax==0.12.8"}
DEPENDENCIES = ["msgpack==1.2.4", "absl-py==2.5.1", "PyYAML==6.0.4", "rich==15.0.0",
                "markdown-it-py==4.3.0", "mdurl==0.1.2", "pygments==2.21.0",
                "typing_extensions==4.16.0"]


def side(name: str) -> Path | None:
    """The folder of a side's packages, or None where it was not made."""
    folder = SIDES / name
    return folder if (folder / "flax" / "jax_utils.py").exists() else None


def link_into(folder: Path, name: str) -> None:
    """Make side `name`'s packages importable by programs run from `folder`."""
    packages = side(name)
    assert packages is not None, f"no flax for the {name} side: run python tests/flax_sides.py"
    for entry in packages.iterdir():
        if not (folder / entry.name).exists():
            os.symlink(entry, folder / entry.name)


def ensure(legacy_python: str) -> None:
    legacy_python = str(Path(legacy_python).absolute()) if os.sep in legacy_python \
        else legacy_python  # the probe below runs in the side's folder
    for name, python in (("legacy", legacy_python), ("current", sys.executable)):
        if side(name) is None:
            subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--target",
                            str(SIDES / name), FLAX[name], *DEPENDENCIES], check=True)
        probe = subprocess.run([python, "-c", "from flax import jax_utils, struct"],
                               cwd=SIDES / name, capture_output=True, text=True)
        if probe.returncode:
            raise SystemExit(f"flax for the {name} side does not import:\n{probe.stderr}")


if __name__ == "__main__":
    ensure(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / ".venv-jax-legacy" / "bin" / "python"))
