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

A program of several files (a package, a notebook: `Program.files`) gets a folder of its own
in each batch root, and its entry runs with that folder as its root (`NAME=ENTRY` to the
worker, which forgets the folder's modules after it, so every package may be `fuzzpkg`). A
notebook entry's layouts are read off the two sides' shapes, as `check` does for notebooks.
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
from equivalence.layouts import inferred_layouts
from equivalence.notebook_entry import is_notebook_entry, write_cells
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
    name: str = ""  # the module name in the batch roots (a folder's name, with `files`)
    # A program of several files: relative path -> (original, migrated) bytes, and the entry
    # to run from their root ("pkg.main:run", "nb.ipynb:NAME"); None: the module `source`.
    files: dict[str, tuple[bytes, bytes]] | None = None
    files_entry: str = ""

    @property
    def entry(self) -> str:
        return self.files_entry if self.files else f"{self.name}:{ENTRY_FUNCTION}"

    @property
    def infers_layouts(self) -> bool:
        """A notebook entry: the migration records no layout map for top-level code."""
        return bool(self.files) and is_notebook_entry(self.entry)


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
        original_root, migrated_root = _write_roots(Path(work), [program], alone=True)
        # A notebook entry left out of the map: `check` reads its layouts off the shapes.
        layouts = {} if program.infers_layouts else {program.entry: program.layouts}
        options = CheckOptions(devices=(devices,), timeout=timeout,
                               reference_python=program.reference_python, layouts=layouts)
        (report,) = list(check(original_root, migrated_root, [program.entry], options))
    return Verdict(program, report.verdict, report.differences + report.stalls, alone=True)


def _write_roots(work: Path, programs: list[Program], alone: bool = False) -> tuple[Path, Path]:
    """Each side's root: a module per program, or a program's files in a folder named after
    it (`alone`: in the root itself)."""
    original_root, migrated_root = work / "original", work / "migrated"
    original_root.mkdir()
    migrated_root.mkdir()
    for program in programs:
        if not program.files:
            (original_root / f"{program.name}.py").write_bytes(program.source)
            (migrated_root / f"{program.name}.py").write_bytes(program.migrated)
            continue
        for side, root in enumerate((original_root, migrated_root)):
            for relative, contents in program.files.items():
                path = (root if alone else root / program.name) / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(contents[side])
    return original_root, migrated_root


def _worker_argument(program: Program) -> str:
    """What batch_worker.py runs: a module's name, or FOLDER=ENTRY."""
    return f"{program.name}={program.entry}" if program.files else program.name


def _check_batch(batch, reference, devices, timeout_per_program, work_dir):
    work = Path(tempfile.mkdtemp(prefix="pmap-migrate-batch-", dir=work_dir))
    try:
        original_root, migrated_root = _write_roots(work, batch)
        names = [_worker_argument(p) for p in batch]
        for side, root in (("original", original_root), ("migrated", migrated_root)):
            for program in batch:
                out = work / side / "out" / program.name
                out.mkdir(parents=True)
                if program.files and is_notebook_entry(program.entry):
                    write_cells(root / program.name, program.entry, out)
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
            layouts = program.layouts
            if program.infers_layouts:
                layouts = (inferred_layouts(original.output, migrated.output, devices)
                           if original.ok and migrated.ok else ())
            report = compare_runs(program.entry, devices, original, migrated, same_jax=same_jax,
                                  layouts=layouts)
            if report.verdict == EQUIVALENT:
                yield Verdict(program, EQUIVALENT, [], alone=False)
            else:
                yield check_alone(program, devices)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _start(root: Path, side_dir: Path, names: list[str], devices: int, python: str):
    out, hlo = side_dir / "out", side_dir / "hlo"
    out.mkdir(parents=True, exist_ok=True)  # its programs' folders are made already
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
