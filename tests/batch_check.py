"""Check generated programs in batches: one worker process per side runs many programs.

The equivalence check (`equivalence.check`) starts two processes per program, each paying
JAX's start-up on 8 fake devices, which is most of the cost of a small generated program.
Here a batch of programs is written as modules `prog_NNNN.py` of one original and one migrated
root; `batch_worker.py` runs every module's `run()` in one process per side and saves each
program's outputs and HLO dumps apart, in the harness's own format. Each program is then
compared ALONE, with the harness's `compare_runs` (outputs through the layout map,
collectives, donation, sharding), so the verdicts are per program.

What sharing a process could change, and what is done about it:
- a program that kills the process (a crash, a collective stall) takes the rest of its batch
  with it: the programs without a result are checked one by one with `equivalence.check`;
- JAX caches the small eager computations (`x[0]`, `device_put`) across modules, so a later
  program may not compile one again; those are data movement, never compared, only noted;
- any verdict other than "equivalent" is checked again alone, with `equivalence.check`, and
  only that verdict counts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from equivalence.check import (
    DIFFERENT,
    EQUIVALENT,
    STALLED,
    CheckOptions,
    check,
    compare_runs,
)
from equivalence.runner import RunOutcome, finished_outcome, worker_environment

BATCH_WORKER = Path(__file__).with_name("batch_worker.py")
ENTRY_FUNCTION = "run"


@dataclasses.dataclass
class Program:
    """One generated program and its migration."""

    source: bytes
    migrated: bytes
    layouts: tuple  # the layout map of `run` (empty: compared as is)
    reference_python: str = sys.executable  # runs the original
    name: str = ""  # the module name in the batch roots

    @property
    def entry(self) -> str:
        return f"{self.name}:{ENTRY_FUNCTION}"


@dataclasses.dataclass
class Verdict:
    program: Program
    verdict: str
    differences: list[str]
    alone: bool  # decided by a check of this program alone


def check_programs(programs: list[Program], *, devices: int = 8, batch_size: int = 25,
                   timeout_per_program: float = 60.0, work_dir: str | None = None):
    """Yield a Verdict per program; programs are grouped by the interpreter of their original."""
    for index, program in enumerate(programs):
        program.name = f"prog_{index:04d}"
    groups: dict[str, list[Program]] = {}
    for program in programs:
        groups.setdefault(program.reference_python, []).append(program)
    for reference, group in groups.items():
        for start in range(0, len(group), batch_size):
            batch = group[start:start + batch_size]
            yield from _check_batch(batch, reference, devices, timeout_per_program, work_dir)


def check_alone(program: Program, devices: int = 8, timeout: float = 180.0) -> Verdict:
    """The harness's own check of one program: two fresh processes."""
    with tempfile.TemporaryDirectory(prefix="pmap-migrate-alone-") as work:
        original_root, migrated_root = _write_roots(Path(work), [program])
        options = CheckOptions(devices=(devices,), timeout=timeout,
                               reference_python=program.reference_python,
                               layouts={program.entry: program.layouts})
        (report,) = list(check(original_root, migrated_root, [program.entry], options))
    return Verdict(program, report.verdict, report.differences + report.stalls, alone=True)


def _write_roots(work: Path, programs: list[Program]) -> tuple[Path, Path]:
    original_root, migrated_root = work / "original", work / "migrated"
    original_root.mkdir()
    migrated_root.mkdir()
    for program in programs:
        (original_root / f"{program.name}.py").write_bytes(program.source)
        (migrated_root / f"{program.name}.py").write_bytes(program.migrated)
    return original_root, migrated_root


def _check_batch(batch, reference, devices, timeout_per_program, work_dir):
    work = Path(tempfile.mkdtemp(prefix="pmap-migrate-batch-", dir=work_dir))
    try:
        original_root, migrated_root = _write_roots(work, batch)
        names = [p.name for p in batch]
        timeout = 60.0 + timeout_per_program * len(batch)
        sides = {}
        processes = {
            side: _start(root, work / side, names, devices, python)
            for side, root, python in (("original", original_root, reference),
                                       ("migrated", migrated_root, sys.executable))
        }
        deadline = time.monotonic() + timeout
        for side, process in processes.items():
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            finally:
                _kill_group(process)
            sides[side] = work / side / "out"
        same_jax = reference == sys.executable
        for program in batch:
            original = _outcome(sides["original"] / program.name)
            migrated = _outcome(sides["migrated"] / program.name)
            if original is None or migrated is None:
                yield check_alone(program, devices)  # its batch process died before it ran
                continue
            report = compare_runs(program.entry, devices, original, migrated, same_jax=same_jax,
                                  layouts=program.layouts)
            if report.verdict == EQUIVALENT:
                yield Verdict(program, EQUIVALENT, [], alone=False)
            else:
                yield check_alone(program, devices)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _start(root: Path, side_dir: Path, names: list[str], devices: int, python: str):
    out, hlo = side_dir / "out", side_dir / "hlo"
    out.mkdir(parents=True)
    env = worker_environment(devices, hlo)
    with open(side_dir / "stdout.txt", "wb") as stdout, open(side_dir / "stderr.txt", "wb") as stderr:
        return subprocess.Popen(
            [python, str(BATCH_WORKER), str(root), str(hlo), str(out), *names],
            env=env, cwd=str(root), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=True,
        )


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the batch worker and anything it started (it runs in its own session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _outcome(program_dir: Path) -> RunOutcome | None:
    """The saved outcome of one program of a batch, or None if it never finished."""
    import json

    result_file = program_dir / "result.json"
    if not (program_dir / "hlo").is_dir() or not result_file.exists():
        return None
    result = json.loads(result_file.read_text())
    if not result["ok"]:
        return RunOutcome(False, result.get("seconds", 0.0), error=result["error"],
                          jax_version=result.get("jax_version", ""))
    return finished_outcome(result, program_dir, result.get("seconds", 0.0))


__all__ = ["DIFFERENT", "EQUIVALENT", "STALLED", "Program", "Verdict", "check_alone",
           "check_programs"]
