"""Worker processes (`-j N`) never outlive the command, and an interrupted run ends cleanly:
"interrupted" on stderr, exit 130, no worker left, no file half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

SITE = b"import jax\n\n\n@jax.pmap\ndef f%d(x):\n    return x * %d\n\n\n"


def _tree(root: Path, count: int = 600) -> dict[Path, bytes]:
    """Enough files with several sites each that two workers take many seconds."""
    root.mkdir()
    originals = {}
    for i in range(count):
        data = b"".join(SITE % (k, i) for k in range(6))
        (root / f"m{i:04d}.py").write_bytes(data)
        originals[root / f"m{i:04d}.py"] = data
    return originals


def _children(pid: int) -> set[int]:
    """Processes whose parent is `pid`, read from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status is left


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _start(command: str, tree: Path) -> tuple[subprocess.Popen, set[int]]:
    """The CLI with two workers, once both are running and busy."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "migrator.cli", command, str(tree), "-j", "2", "--no-progress"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert _wait_for(lambda: len(_children(cli.pid)) >= 2, 60), "the workers never started"
    time.sleep(1.0)  # both are busy with their chunks now
    assert cli.poll() is None, "the run must still be going when it is stopped"
    return cli, _children(cli.pid)


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def test_workers_die_when_the_main_process_is_killed(tmp_path):
    _tree(tmp_path / "tree")
    cli, workers = _start("diff", tmp_path / "tree")
    try:
        cli.kill()
        cli.wait(timeout=30)
        assert _wait_for(lambda: not any(map(_alive, workers)), 5), \
            [pid for pid in workers if _alive(pid)]
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_interrupted_apply_exits_130_with_workers_gone_and_files_whole(signum, tmp_path):
    from transforms.pipeline import migrate_source

    originals = _tree(tmp_path / "tree", 400)
    cli, workers = _start("apply", tmp_path / "tree")
    try:
        cli.send_signal(signum)
        _, stderr = cli.communicate(timeout=30)
        assert cli.returncode == 130, stderr
        assert stderr.decode().rstrip().endswith("pmap-migrate: interrupted"), stderr
        assert b"Traceback" not in stderr and b"Aborted" not in stderr
        assert _wait_for(lambda: not any(map(_alive, workers)), 5)
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    leftovers = [p.name for p in (tmp_path / "tree").iterdir() if ".pmap-migrate." in p.name]
    assert leftovers == []
    states = set()
    for path, data in originals.items():
        now = path.read_bytes()
        states.add("old" if now == data else "new")
        if now != data:
            assert now == migrate_source(data).source, path
    assert states == {"old", "new"} or states == {"old"}, states


def test_a_worker_whose_parent_is_gone_exits(tmp_path):
    """The initializer's own check: started after its parent already ended, a worker exits
    at once instead of waiting for work forever."""
    script = (
        "import os, sys, time\n"
        "from migrator.interrupts import init_worker\n"
        "main = os.getpid()\n"
        "if os.fork() == 0:\n"
        "    time.sleep(0.5)  # the parent is gone by now\n"
        "    init_worker(main)\n"
        "    open(sys.argv[1], 'w').write('survived')\n"
        "    os._exit(0)\n"
        "os._exit(0)\n"
    )
    marker = tmp_path / "marker"
    subprocess.run([sys.executable, "-c", script, str(marker)],
                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    time.sleep(1.5)
    assert not marker.exists()
