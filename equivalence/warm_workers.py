"""Warm workers: interpreters that have imported numpy and jax once and fork a run per entry.

A fresh worker spends 1-2 s of CPU importing jax before the program starts, more than most
corpus programs take to run; `check` of the corpus starts hundreds. A warm worker
(`worker.py --serve`) does those imports once; each run is a process forked from it, in its
own process group, with the run's environment, working directory and output files, in the
state a fresh worker reaches just before it imports the program (no backend started: the
device count and HLO dump folder still come from the run's XLA_FLAGS).

Runs stay apart as before: one process per run, nothing of one run seen by another. Warm
workers are kept per interpreter, environment and `lane`: the determinism guard runs a side's
repeats in other lanes, so a repeat comes from another interpreter (another hash seed, another
address layout), as with fresh workers. A warm worker ends when the harness does (it watches
its parent), and takes a run in progress with it. PMAP_MIGRATE_FRESH_WORKERS=1 turns them off.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from pathlib import Path

from equivalence import runner

FRESH_WORKERS = "PMAP_MIGRATE_FRESH_WORKERS"
# Set per run, after a warm worker has started: they never take part in choosing one.
PER_RUN = ("XLA_FLAGS", "PJRT_NPROC", "PMAP_MIGRATE_DEVICES", "PMAP_MIGRATE_HARNESS_PID")
# The variables an interpreter, numpy or jax may read while the warm worker starts and
# imports: runs that differ in these need another warm worker. Any other variable (pytest's
# PYTEST_CURRENT_TEST, say) only reaches the run, which gets its whole environment anyway.
AT_IMPORT = ("PYTHON", "JAX_", "XLA_", "TF_", "TPU_", "LD_", "OMP_", "OPENBLAS", "MKL_",
             "NUMPY", "NPY_", "PATH", "HOME", "VIRTUAL_ENV", "CUDA", "LIBTPU", "LANG", "LC_")
# Idle warm workers kept at most (each holds jax in memory, ~100 MB): the oldest go first.
MAX_IDLE = 6


class WarmWorkerLost(RuntimeError):
    """The warm worker ended before it could report the run; run it in a fresh worker."""


def enabled(platform: str) -> bool:
    """Warm workers on fake CPU devices, unless turned off (an accelerator's runtime is left
    to start in a process of its own)."""
    return platform == "cpu" and os.environ.get(FRESH_WORKERS, "") in ("", "0")


class WarmWorker:
    """One `worker.py --serve` process, used by one run at a time."""

    def __init__(self, python: str, env: dict[str, str]):
        self.process = runner.start_worker(
            [python, str(runner.WORKER), "--serve"], env=env, cwd="/",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._pending = b""

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, argv: list[str], env: dict[str, str], cwd: str, stdout: Path, stderr: Path,
            timeout: float) -> int | None:
        """Run main(*argv) in a forked child; its return code as Popen gives it, or None when
        it ran past `timeout` seconds (then killed with its group). WarmWorkerLost: the run
        never started."""
        request = {"argv": argv, "env": env, "cwd": cwd, "stdout": str(stdout),
                   "stderr": str(stderr)}
        deadline = time.monotonic() + timeout
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except OSError as error:
            raise WarmWorkerLost(str(error)) from error
        try:
            pid = self._answer(deadline)["pid"]
        except BaseException:  # not started by the deadline, or interrupted
            self.close()
            raise
        runner.track_group(pid)
        try:
            answer = self._answer(deadline)
        except WarmWorkerLost:  # it died during the run (killed): so did the run
            _kill_group(pid)
            return -signal.SIGKILL
        except TimeoutError:
            _kill_group(pid)
            self._answer(time.monotonic() + 30)  # reaped by the warm worker
            return None
        except BaseException:
            _kill_group(pid)  # interrupted while waiting (in the calling thread)
            self.close()
            raise
        finally:
            runner.worker_ended(pid)
        return answer["returncode"]

    def _answer(self, deadline: float) -> dict:
        """The warm worker's next line, by `deadline` (TimeoutError) or WarmWorkerLost."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if not selector.select(min(left, 1.0)):
                    continue
                chunk = os.read(self.process.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise WarmWorkerLost("the warm worker ended")
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        runner.worker_ended(self.process.pid)
        _kill_group(self.process.pid)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def _start_environment(env: dict[str, str]) -> dict[str, str]:
    """What of a run's environment a warm worker starts with (see AT_IMPORT)."""
    return {k: v for k, v in env.items() if k.startswith(AT_IMPORT) and k not in PER_RUN}


class _Pool:
    """Idle warm workers by (python, starting environment, lane), oldest first; a run takes
    one or starts one."""

    def __init__(self):
        self._idle: list[tuple[tuple, WarmWorker]] = []
        self._lock = threading.Lock()

    @staticmethod
    def _key(python: str, env: dict[str, str], lane: int) -> tuple:
        return python, lane, tuple(sorted(_start_environment(env).items()))

    def take(self, python: str, env: dict[str, str], lane: int) -> WarmWorker:
        key = self._key(python, env, lane)
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):
                if self._idle[index][0] == key:
                    worker = self._idle.pop(index)[1]
                    if worker.alive():
                        return worker
        return WarmWorker(python, _start_environment(env))

    def give_back(self, python: str, env: dict[str, str], lane: int, worker: WarmWorker):
        if not worker.alive():
            return
        with self._lock:
            self._idle.append((self._key(python, env, lane), worker))
            surplus = self._idle[:-MAX_IDLE] if len(self._idle) > MAX_IDLE else []
            del self._idle[:len(surplus)]
        for _, old in surplus:
            old.close()

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            workers = [w for _, w in self._idle]
            self._idle.clear()
        for worker in workers:
            worker.close()


POOL = _Pool()
atexit.register(POOL.close)


def run_warm(python: str, argv: list[str], env: dict[str, str], cwd: str, stdout: Path,
             stderr: Path, timeout: float, lane: int) -> int | None:
    """Run one entry in a warm worker (see WarmWorker.run); WarmWorkerLost if there is none."""
    worker = POOL.take(python, env, lane)
    try:
        code = worker.run(argv, env, cwd, stdout, stderr, timeout)
    except TimeoutError:  # the warm worker itself did not start in time
        return None
    POOL.give_back(python, env, lane, worker)
    return code


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
