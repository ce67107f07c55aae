"""Run an entry point in a fresh subprocess on N fake CPU devices and load what it returned."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from equivalence.hlo import CompiledSummary, read_dump

WORKER = Path(__file__).with_name("worker.py")

# What XLA:CPU prints when the threads of one collective never all meet: jax 0.4.38 warns
# every 5 s and waits forever, jax >= 0.5 warns after 20 s and aborts the process after 40 s.
RENDEZVOUS_STALL = re.compile(
    r"Expected \d+ threads to join the rendezvous[^\n]*"
    r"|waiting for all participants to arrive at rendezvous[^\n]*"
    r"|Termination timeout for `[^`\n]*` of \d+ seconds exceeded[^\n]*"
)


@dataclasses.dataclass
class RunOutcome:
    ok: bool
    seconds: float
    output: dict | None = None  # {"treedef", "leaves", "arrays"}
    error: str = ""
    jax_version: str = ""
    compiled: CompiledSummary = dataclasses.field(default_factory=lambda: CompiledSummary([]))
    # The runtime's own words when XLA:CPU's collective rendezvous stalled; the run then says
    # nothing about the program (see cpu_thread_pool_size).
    stall: str = ""


def cpu_thread_pool_size(devices: int) -> int:
    """Threads for XLA:CPU's client pool (read from PJRT_NPROC), enough that collectives on
    fake devices cannot starve.

    XLA:CPU sizes that pool max(cores, devices): exactly enough for one collective, whose
    per-device executions all block in the rendezvous until every device has arrived. But each
    call of a multi-device program also takes a pool thread per device to enqueue its work,
    and that thread blocks while the device already has its maximum of computations in flight,
    which happens when a loop dispatches steps faster than they run (numpy batches, hundreds
    of steps). Then fewer than `devices` threads are left for the running collective, which
    never completes: jax 0.4.38 hangs, newer versions abort after 40 s. One dispatching thread
    blocks at most `devices` pool threads, so twice the device count always leaves a full set.
    The pool's size decides where work runs, never what it computes.
    """
    return max(2 * devices, os.cpu_count() or 1)


def worker_environment(devices: int, hlo_dir: Path | None, rng_compat: bool = True,
                       platform: str = "cpu") -> dict[str, str]:
    """The environment of one worker process: `devices` fake CPU devices, an HLO dump into
    `hlo_dir` (None: no dump, as in the determinism guard's repeats), a client pool that
    cannot starve (cpu_thread_pool_size), and the random-stream flag that makes old
    references draw what current JAX draws. On another `platform` (tpu, gpu) the program runs
    on that machine's real devices, which must number `devices` (the worker checks)."""
    env = dict(os.environ)
    dump = [f"--xla_dump_to={hlo_dir}", "--xla_dump_hlo_as_text"] if hlo_dir else []
    fake = [f"--xla_force_host_platform_device_count={devices}"] if platform == "cpu" else []
    env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), *fake, *dump]).strip()
    env["JAX_PLATFORMS"] = platform
    if platform != "cpu":  # fake CPU devices number what the flag says; real ones are counted
        env["PMAP_MIGRATE_DEVICES"] = str(devices)
    env["PJRT_NPROC"] = str(max(cpu_thread_pool_size(devices), _int(env.get("PJRT_NPROC"))))
    if rng_compat:
        # jax 0.5 made threefry partitionable by default, which changed random streams; with
        # the flag on, old references draw the same numbers as current JAX, so only the
        # migration is compared, not the version upgrade.
        env["JAX_THREEFRY_PARTITIONABLE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PMAP_MIGRATE_HARNESS_PID"] = str(os.getpid())  # worker.exit_with_parent watches it
    return env


# Process groups of the workers running now. Each runs in its own session or group, so a
# Ctrl-C or SIGTERM that stops the harness reaches none of them, and the threads waiting for
# them never hear it: `worker_threads` kills them when its caller is interrupted. Workers are
# started under the lock, so one being started while the harness stops is killed too, and
# none starts after that.
_running_groups: set[int] = set()
_running_lock = threading.Lock()
_stopping = False


class HarnessStopped(RuntimeError):
    """The harness was interrupted; no worker may start."""


def start_worker(command: list[str], *, group: int | None = None, **popen) -> subprocess.Popen:
    """Popen `command` in a new session, or with `group` in process group `group` (0: a new
    one), tracked until `worker_ended`."""
    session = {"start_new_session": True} if group is None else {"process_group": group}
    with _running_lock:
        if _stopping:
            raise HarnessStopped("the check was interrupted")
        process = subprocess.Popen(command, **session, **popen)
        _running_groups.add(group or process.pid)
    return process


def track_group(pgid: int) -> None:
    """Track a worker's process group started by other means (a warm worker's fork) until
    `worker_ended`; killed at once if the harness is stopping."""
    with _running_lock:
        if not _stopping:
            _running_groups.add(pgid)
            return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    raise HarnessStopped("the check was interrupted")


def worker_ended(pgid: int) -> None:
    with _running_lock:
        _running_groups.discard(pgid)


def _stop_all_workers() -> None:
    """Kill every worker group this process has running, and start no more."""
    global _stopping
    with _running_lock:
        _stopping = True
        groups = list(_running_groups)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextlib.contextmanager
def worker_threads(max_workers: int):
    """A thread pool for running workers that leaves none behind: interrupted (Ctrl-C,
    SIGTERM, the caller closing a generator), it kills the running workers, drops the queued
    runs and joins its threads before the interruption goes on."""
    global _stopping
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
    try:
        yield pool
    except BaseException:
        _stop_all_workers()
        pool.shutdown(wait=True, cancel_futures=True)
        with _running_lock:
            _stopping = False
        raise
    pool.shutdown(wait=True)


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
    hlo: bool = True,
    platform: str = "cpu",
    lane: int = 0,
) -> RunOutcome:
    """`hlo`: dump and read the compiled HLO (collectives, donation); off, the outcome's
    `compiled` is empty. `lane`: runs in different lanes never share a warm worker (the
    determinism guard's repeats; equivalence/warm_workers.py)."""
    if os.sep in python:
        python = os.path.abspath(python)
    hlo_dir = out_dir / "hlo"
    env = worker_environment(devices, hlo_dir if hlo else None, rng_compat, platform)
    start = time.perf_counter()
    failed = prepare_notebook(root, entry, out_dir)
    if failed:
        return RunOutcome(False, 0.0, error=failed)
    # Output goes to files, not pipes: an entry that prints megabytes cannot fill memory or
    # block, and the tail of stderr explains a crash.
    returncode = _run_worker(python, [str(root), entry, str(out_dir)], env, root, out_dir,
                             timeout, platform, lane)
    if returncode is None:
        stall = stall_message(out_dir / "stderr.txt")
        error = f"timed out after {timeout:g} s" + (f" in a collective rendezvous: {stall}" if stall else "")
        return RunOutcome(False, time.perf_counter() - start, error=error, stall=stall)
    seconds = time.perf_counter() - start
    result_file = out_dir / "result.json"
    if not result_file.exists():
        stall = stall_message(out_dir / "stderr.txt")
        if stall:
            return RunOutcome(False, seconds, error=f"worker aborted (exit {returncode}): {stall}", stall=stall)
        return RunOutcome(False, seconds, error=died_without_result(
            "worker", returncode, _tail(out_dir / "stderr.txt")))
    result = json.loads(result_file.read_text())
    if not result["ok"]:
        found = RENDEZVOUS_STALL.search(result["error"])
        stall = found.group(0).strip()[:500] if found else stall_message(out_dir / "stderr.txt")
        return RunOutcome(False, seconds, error=result["error"], jax_version=result.get("jax_version", ""),
                          stall=stall)
    return finished_outcome(result, out_dir, seconds)


def _run_worker(python: str, argv: list[str], env: dict[str, str], root: Path, out_dir: Path,
                timeout: float, platform: str, lane: int) -> int | None:
    """Run the worker, forked from a warm worker where one can start it, else in a new
    interpreter; its return code, or None past `timeout`."""
    from equivalence import warm_workers  # it builds on this module

    if warm_workers.enabled(platform):
        try:
            return warm_workers.run_warm(python, argv, env, str(root), out_dir / "stdout.txt",
                                         out_dir / "stderr.txt", timeout, lane)
        except warm_workers.WarmWorkerLost:
            pass  # none could start the run: a fresh worker runs it
    return _run_fresh(python, argv, env, root, out_dir, timeout)


def _run_fresh(python: str, argv: list[str], env: dict[str, str], root: Path, out_dir: Path,
               timeout: float) -> int | None:
    """Run the worker in a new interpreter; its return code, or None past `timeout`."""
    with open(out_dir / "stdout.txt", "wb") as stdout, open(out_dir / "stderr.txt", "wb") as stderr:
        process = start_worker(
            [python, str(WORKER), *argv],
            env=env, cwd=str(root), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
        )
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return None
        except BaseException:
            _kill_group(process)  # interrupted while waiting (in the calling thread)
            raise
        finally:
            worker_ended(process.pid)


def prepare_notebook(root: Path, entry: str, out_dir: Path) -> str:
    """For a notebook entry, write its masked cells where the worker reads them
    (equivalence/notebook_entry.py); why it could not, or ""."""
    from equivalence.notebook_entry import is_notebook_entry, write_cells

    if not is_notebook_entry(entry):
        return ""
    try:
        write_cells(root, entry, out_dir)
    except Exception as error:  # noqa: BLE001 - a missing or broken notebook is reported
        return f"the notebook could not be read: {type(error).__name__}: {error}"
    return ""


def finished_outcome(result: dict, out_dir: Path, seconds: float) -> RunOutcome:
    """The outcome of a worker that wrote an ok `result`: its saved outputs and compiled HLO."""
    try:
        with np.load(out_dir / "outputs.npz") as saved:
            arrays = {key: saved[key] for key in saved.files}
    except (OSError, ValueError) as error:
        return RunOutcome(False, seconds, error=f"outputs could not be read back: {error}")
    output = {"treedef": result["treedef"], "leaves": result["leaves"], "arrays": arrays}
    return RunOutcome(True, seconds, output=output, jax_version=result["jax_version"],
                      compiled=read_dump(out_dir / "hlo"))


def died_without_result(who: str, returncode: int, stderr_tail: str) -> str:
    """Why a worker left no result: how it ended, then its stderr's tail. The worker reports
    any exception itself, so only os._exit or a crash ends it this way, often in silence:
    the message still says how, e.g. `worker died (exit 3) without a result (os._exit or a
    crash)`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        how = f"{who} died (signal {name}) without a result (a crash, or killed)"
    else:
        how = f"{who} died (exit {returncode}) without a result (os._exit or a crash)"
    return f"{how}: {stderr_tail}" if stderr_tail else how


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the worker and anything it started (it runs in its own session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def stall_message(stderr: Path, limit: int = 1 << 18) -> str:
    """The runtime's rendezvous-stall message in the tail of a worker's stderr, or ""."""
    found = RENDEZVOUS_STALL.findall(_tail(stderr, limit))
    return found[-1].strip()[:500] if found else ""


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _tail(path: Path, limit: int = 2000) -> str:
    data = path.read_bytes()[-limit:] if path.exists() else b""
    return data.decode(errors="replace").strip()
