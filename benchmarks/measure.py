"""Run one command and measure it: wall time, exit code, and peak memory of its process tree.

Memory is measured two ways, both stdlib only:
- `tree_rss`: a sampler thread reads /proc every 50 ms, finds every descendant of the
  command (worker processes included) and sums their memory; the peak of that sum is
  reported. Each process counts its PSS (proportional set size, from smaps_rollup), so pages
  that forked workers share with their parent are counted once in total, not once per process.
  It is a sample: a spike shorter than 50 ms can be missed.
- `max_rss`: the largest RSS any single process of the tree reached (kernel-reported
  `ru_maxrss`). The command is started under `/usr/bin/time -f %M` when that exists: Linux
  keeps a process's high-water mark across fork+exec, so `ru_maxrss` taken straight from a
  child of this (large) Python process would report this process's own size.

CPU: `cpu` is user + system time of the command and of every descendant it waited for (its
worker processes), from the same `wait4`. `other_load` is the share of the machine's CPU that
OTHER processes used while the command ran (busy time from /proc/stat minus `cpu`, over
wall time x cores): near 0 on a quiet machine; when it is high the wall times are inflated.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
SAMPLE_SECONDS = 0.05
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


@dataclasses.dataclass
class Measured:
    command: list[str]
    wall: float
    returncode: int
    tree_rss_kb: int  # peak of the summed RSS of the command and all its descendants
    max_rss_kb: int  # ru_maxrss: the largest single process of the tree
    cpu: float = 0.0  # user + system seconds of the command and every descendant it reaped
    other_load: float = 0.0  # share of the machine's CPU used by OTHER processes meanwhile (0-1)
    stderr_tail: str = ""

    @property
    def tree_rss_mb(self) -> float:
        return self.tree_rss_kb / 1024

    @property
    def max_rss_mb(self) -> float:
        return self.max_rss_kb / 1024


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores, from /proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _rss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them), or RSS
    where smaps_rollup is not readable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_kb(root: int) -> int:
    children = _children_map()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss_kb(pid)
        stack.extend(children.get(pid, ()))
    return total


def run(
    command: list[str], *, cwd: str | Path | None = None, env: dict | None = None,
    stdout_path: str | Path | None = None, stderr_path: str | Path | None = None,
) -> Measured:
    """Run `command` to completion (stdout to a file or /dev/null) and measure it."""
    rss_file = None
    if GNU_TIME:
        handle, rss_file = tempfile.mkstemp(prefix="bench-maxrss-")
        os.close(handle)
        command = [GNU_TIME, "-f", "%M", "-o", rss_file, "--", *command]
    stdout = open(stdout_path, "wb") if stdout_path else open(os.devnull, "wb")
    stderr_file = stderr_path or os.devnull
    stderr = open(stderr_file, "wb")
    peak = [0]
    done = threading.Event()
    busy_before = busy_seconds()
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
    )

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(process.pid))
            done.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        stdout.close()
        stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    other = max(0.0, busy_seconds() - busy_before - cpu)
    other_load = other / (wall * (os.cpu_count() or 1))
    max_rss = usage.ru_maxrss
    if rss_file:
        try:
            max_rss = int(Path(rss_file).read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            pass
        os.unlink(rss_file)
        command = command[6:]
    tail = ""
    if stderr_path:
        data = Path(stderr_path).read_bytes()
        tail = data[-3000:].decode(errors="replace")
    return Measured(
        command=list(command), wall=wall, returncode=process.returncode,
        tree_rss_kb=peak[0], max_rss_kb=max_rss, cpu=cpu, other_load=other_load,
        stderr_tail=tail,
    )
