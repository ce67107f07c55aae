"""Stopping a run: Ctrl-C and SIGTERM end it cleanly, and worker processes never outlive it.

SIGINT and SIGTERM raise `Interrupted` in the main process. It unwinds like any exception,
so a write in progress removes its temporary file (the sections that must not be cut in two
block both signals: `deferred_interrupts`), the worker pool is stopped, and the command
line prints "interrupted" and exits 130. A SIGKILL cannot be caught: the workers learn of it
from the kernel (PR_SET_PDEATHSIG on Linux), or by watching their parent elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

EXIT_INTERRUPTED = 130
_INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PARENT_POLL_SECONDS = 0.5


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. Not a KeyboardInterrupt: click turns those into "Aborted!"
    and exit 1, and an `except Exception` in between must not swallow it either."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def install_handlers() -> None:
    """In the main process of a command-line run: both signals raise `Interrupted`."""
    for signum in _INTERRUPTS:
        signal.signal(signum, _raise_interrupted)


def defer_interrupts():
    """Block SIGINT / SIGTERM in this thread (where the platform can); the old mask."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)


def restore_interrupts(mask) -> None:
    """Undo `defer_interrupts`: a signal that arrived meanwhile is handled now."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def init_worker(main_pid: int) -> None:
    """Initializer of every worker process: die with the parent, leave signals to it.

    Ctrl-C reaches the whole process group; the main process stops the pool, so a worker
    ignores SIGINT instead of printing a traceback. SIGTERM gets its default action back (a
    forked worker inherits the main process's handler, which would only raise here).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()  # the main process, or the fork server that started this worker
    watched_by_kernel = _kill_me_when_parent_exits()
    if os.getppid() != parent or not _alive(main_pid):  # it ended before we could ask
        os._exit(1)
    if not watched_by_kernel:
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True,
                         name="pmap-migrate-parent-watch").start()


def _kill_me_when_parent_exits() -> bool:
    """Linux: ask the kernel for SIGKILL when the parent exits, however it exits."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _exit_when_orphaned(parent: int) -> None:
    """Where the kernel cannot tell: once the parent is gone the worker is re-parented."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_workers(pool) -> None:
    """Kill a ProcessPoolExecutor's workers now: their pending work is no longer wanted, and
    shutting down politely would wait for every chunk already queued to them."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14+
    if kill is not None:
        with contextlib.suppress(Exception):
            kill()
            return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()
