"""Run an entry point as P processes on localhost, as a multi-host job would run it.

`check --processes P` runs each side of an entry this way: P subprocesses joined by
`jax.distributed.initialize` (coordinator on a free localhost port, CPU collectives over gloo),
each with devices / P fake CPU devices and its own HLO dump, each returning its process-local
outputs. One outcome per process comes back, so outputs, collectives and donation are
compared process by process.

Nothing is left behind: the processes share one process group, which is killed as soon as
every process has written its result (jax.distributed's shutdown barrier would otherwise
wait for peers), when one of them fails (the others would wait in a collective for ever), or
at the timeout. A process that raised, died or hung is named in its outcome, and the others
are reported as stopped because of it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from equivalence.runner import (
    RunOutcome, died_without_result, finished_outcome, prepare_notebook, stall_message,
    start_worker, worker_ended,
    worker_environment,
)

WORKER = Path(__file__).with_name("multiprocess_worker.py")
JOINED = "joined"  # multiprocess_worker.JOINED (the worker imports nothing of this project)
POLL_SECONDS = 0.1
# A job whose processes could not join (the coordinator's port taken at its bind, say) never
# ran the program; it is run again on another port, at most this many times in all.
JOIN_ATTEMPTS = 3
EXIT_GRACE_SECONDS = 10.0  # for a clean exit once every process has its result


def free_port() -> int:
    """A localhost port no one listens on now, so two checks can run at once.

    Drawn below the ephemeral range: ports there are never handed out by the OS for outgoing
    connections or bind(0) (gloo's own sockets), so nothing takes the port between this probe
    and the coordinator's bind. Two checks drawing the same port are caught by the retry in
    run_entry_processes."""
    low = _ephemeral_range()[0]
    for _ in range(64):
        port = random.randrange(max(1024, low - 16384), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # everything below is taken: let the OS pick
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ephemeral_range() -> tuple[int, int]:
    """Linux's range for ports the OS picks; IANA's where it cannot be read."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def run_entry_processes(
    root: Path, entry: str, *, devices: int = 8, processes: int = 2,
    python: str = sys.executable, timeout: float = 300, rng_compat: bool = True,
    work_dir: str | None = None, hlo: bool = True,
) -> list[RunOutcome]:
    """Run `entry` of the program in `root` as `processes` processes with `devices` devices in
    all; one RunOutcome per process, in process order. `hlo`: dump the compiled HLO."""
    if processes < 1 or devices % processes:
        raise ValueError(f"{devices} devices cannot be split over {processes} processes")
    work = Path(tempfile.mkdtemp(prefix="pmap-migrate-mp-", dir=work_dir))
    python = os.path.abspath(python) if os.sep in python else python
    try:
        for attempt in range(JOIN_ATTEMPTS):
            outcomes, joined = _run(work / f"attempt{attempt}", Path(root).absolute(), entry,
                                    devices // processes, processes, python, timeout,
                                    rng_compat, hlo)
            if joined:
                break
        return outcomes
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, root: Path, entry: str, local_devices: int, processes: int, python: str,
         timeout: float, rng_compat: bool, hlo: bool = True) -> tuple[list[RunOutcome], bool]:
    """One attempt: the outcomes, and whether every process joined the job."""
    coordinator = f"127.0.0.1:{free_port()}"
    folders = [work / f"process{p}" for p in range(processes)]
    work.mkdir()
    start = time.perf_counter()
    running: list[subprocess.Popen] = []
    try:
        for p, folder in enumerate(folders):
            folder.mkdir()
            failed = prepare_notebook(root, entry, folder)
            if failed:
                return [RunOutcome(False, 0.0, error=failed) for _ in folders], True
            with open(folder / "stdout.txt", "wb") as out, open(folder / "stderr.txt", "wb") as err:
                # One new process group for the job (setpgid: a group of this session).
                group = running[0].pid if running else 0
                running.append(start_worker(
                    [python, str(WORKER), str(root), entry, str(folder), coordinator,
                     str(processes), str(p)],
                    env=worker_environment(local_devices, folder / "hlo" if hlo else None,
                                           rng_compat),
                    cwd=str(root),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, group=group,
                ))
        results, failed, timed_out = _wait(running, folders, start + timeout)
    finally:
        if running:
            _kill_group(running)
            worker_ended(running[0].pid)
    seconds = time.perf_counter() - start
    outcomes = []
    for p, (process, folder) in enumerate(zip(running, folders)):
        result = results.get(p)
        if result is not None:
            outcomes.append(_outcome(result, folder, seconds, p, processes))
        elif timed_out:
            outcomes.append(RunOutcome(False, seconds, error=(
                f"process {p} of {processes} timed out after {timeout:g} s")))
        elif p == failed:
            outcomes.append(RunOutcome(False, seconds, error=died_without_result(
                f"process {p} of {processes}", process.returncode, _tail(folder / "stderr.txt"))))
        else:
            outcomes.append(RunOutcome(False, seconds, error=(
                f"process {p} of {processes} stopped: process {failed} failed")))
    # A process whose runtime reported a rendezvous stall says nothing about the program.
    outcomes = [
        outcome if outcome.ok else dataclasses.replace(
            outcome, stall=outcome.stall or stall_message(folder / "stderr.txt"))
        for outcome, folder in zip(outcomes, folders)
    ]
    # A process that never joined (its coordinator crashed or raised at its port) means no
    # process ran the program. A job that timed out is not run again: it would only wait again.
    joined = timed_out or all((folder / JOINED).exists() for folder in folders)
    return outcomes, joined


def _wait(running, folders, deadline):
    """Poll until every process has a result, one fails, or the deadline passes. Returns
    (results by process, the first failed process or None, timed out)."""
    results: dict[int, dict] = {}
    while True:
        for p, (process, folder) in enumerate(zip(running, folders)):
            if p in results:
                continue
            result = _read_result(folder)
            if result is not None:
                results[p] = result
                if not result.get("ok"):
                    return results, p, False
            elif process.poll() is not None:  # exited without a result: crashed
                time.sleep(POLL_SECONDS)  # a result written just before exit
                result = _read_result(folder)
                if result is None:
                    return results, p, False
                results[p] = result
        if len(results) == len(running):
            _wait_for_exit(running, min(deadline, time.perf_counter() + EXIT_GRACE_SECONDS))
            return results, None, False
        if time.perf_counter() > deadline:
            return results, None, True
        time.sleep(POLL_SECONDS)


def _wait_for_exit(running, deadline):
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            return


def _read_result(folder: Path) -> dict | None:
    """The worker's result.json, once it is complete."""
    try:
        return json.loads((folder / "result.json").read_text())
    except (OSError, ValueError):
        return None


def _outcome(result: dict, folder: Path, seconds: float, p: int, processes: int) -> RunOutcome:
    if not result["ok"]:
        return RunOutcome(False, seconds, error=f"process {p} of {processes}: {result['error']}",
                          jax_version=result.get("jax_version", ""))
    return finished_outcome(result, folder, seconds)


def _kill_group(running: list[subprocess.Popen]) -> None:
    """Kill every process of the job and anything they started: they share one group."""
    try:
        os.killpg(running[0].pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for process in running:
        if process.poll() is None:  # it left the group (Popen never signals a reaped pid)
            process.kill()
        process.wait()


def _tail(path: Path, limit: int = 2000) -> str:
    data = path.read_bytes()[-limit:] if path.exists() else b""
    return data.decode(errors="replace").strip()
