"""Run an entry point in a fresh subprocess on N fake CPU devices and load what it returned."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("worker.py")


@dataclasses.dataclass
class RunOutcome:
    ok: bool
    seconds: float
    output: dict | None = None  # {"treedef", "leaves", "arrays"}
    error: str = ""
    jax_version: str = ""
    hlo_dir: Path | None = None


def run_entry(
    root: Path,
    entry: str,
    *,
    devices: int = 8,
    python: str = sys.executable,
    timeout: float = 300,
    work_dir: Path | None = None,
) -> RunOutcome:
    """Run `entry` (module:function) with `root` on sys.path, in its own process."""
    out_dir = Path(tempfile.mkdtemp(prefix="pmap-migrate-run-", dir=work_dir))
    hlo_dir = out_dir / "hlo"
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        [
            env.get("XLA_FLAGS", ""),
            f"--xla_force_host_platform_device_count={devices}",
            f"--xla_dump_to={hlo_dir}",
            "--xla_dump_hlo_as_text",
        ]
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    try:
        completed = subprocess.run(
            [python, str(WORKER), str(root), entry, str(out_dir)],
            env=env,
            cwd=str(root),
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return RunOutcome(False, time.perf_counter() - start, error=f"timed out after {timeout:g} s")
    seconds = time.perf_counter() - start
    result_file = out_dir / "result.json"
    if not result_file.exists():
        tail = completed.stderr.decode(errors="replace")[-2000:]
        return RunOutcome(False, seconds, error=f"worker died (exit {completed.returncode}): {tail}")
    result = json.loads(result_file.read_text())
    if not result["ok"]:
        return RunOutcome(False, seconds, error=result["error"], jax_version=result.get("jax_version", ""))
    with np.load(out_dir / "outputs.npz") as saved:
        arrays = {key: saved[key] for key in saved.files}
    output = {"treedef": result["treedef"], "leaves": result["leaves"], "arrays": arrays}
    return RunOutcome(True, seconds, output=output, jax_version=result["jax_version"], hlo_dir=hlo_dir)
