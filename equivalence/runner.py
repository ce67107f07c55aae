"""Run an entry point in a fresh subprocess on N fake CPU devices and load what it returned."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from equivalence.hlo import CompiledSummary, read_dump

WORKER = Path(__file__).with_name("worker.py")


@dataclasses.dataclass
class RunOutcome:
    ok: bool
    seconds: float
    output: dict | None = None  # {"treedef", "leaves", "arrays"}
    error: str = ""
    jax_version: str = ""
    compiled: CompiledSummary = dataclasses.field(default_factory=lambda: CompiledSummary([]))


def run_entry(root: Path, entry: str, **options) -> RunOutcome:
    """Run `entry` (module:function) with `root` on sys.path, in its own process; clean up."""
    work = Path(tempfile.mkdtemp(prefix="pmap-migrate-run-", dir=options.pop("work_dir", None)))
    try:
        return _run_in(work, Path(root).absolute(), entry, **options)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_in(
    out_dir: Path,
    root: Path,
    entry: str,
    *,
    devices: int = 8,
    python: str = sys.executable,
    timeout: float = 300,
    rng_compat: bool = True,
) -> RunOutcome:
    if os.sep in python:
        python = os.path.abspath(python)
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
    if rng_compat:
        # jax 0.5 made threefry partitionable by default, which changed random streams; with
        # the flag on, old references draw the same numbers as current JAX, so only the
        # migration is compared, not the version upgrade.
        env["JAX_THREEFRY_PARTITIONABLE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    # Output goes to files, not pipes: an entry that prints megabytes cannot fill memory or
    # block, and the tail of stderr explains a crash.
    with open(out_dir / "stdout.txt", "wb") as stdout, open(out_dir / "stderr.txt", "wb") as stderr:
        process = subprocess.Popen(
            [python, str(WORKER), str(root), entry, str(out_dir)],
            env=env, cwd=str(root), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return RunOutcome(False, time.perf_counter() - start, error=f"timed out after {timeout:g} s")
    seconds = time.perf_counter() - start
    result_file = out_dir / "result.json"
    if not result_file.exists():
        tail = _tail(out_dir / "stderr.txt")
        return RunOutcome(False, seconds, error=f"worker died (exit {returncode}): {tail}")
    result = json.loads(result_file.read_text())
    if not result["ok"]:
        return RunOutcome(False, seconds, error=result["error"], jax_version=result.get("jax_version", ""))
    try:
        with np.load(out_dir / "outputs.npz") as saved:
            arrays = {key: saved[key] for key in saved.files}
    except (OSError, ValueError) as error:
        return RunOutcome(False, seconds, error=f"outputs could not be read back: {error}")
    output = {"treedef": result["treedef"], "leaves": result["leaves"], "arrays": arrays}
    return RunOutcome(
        True, seconds, output=output, jax_version=result["jax_version"], compiled=read_dump(hlo_dir)
    )


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the worker and anything it started (it runs in its own session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _tail(path: Path, limit: int = 2000) -> str:
    data = path.read_bytes()[-limit:] if path.exists() else b""
    return data.decode(errors="replace").strip()
