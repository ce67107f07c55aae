"""Reading source bytes safely and writing them back atomically, keeping mode and bytes.

libcst works on bytes and gives bytes back in the file's own encoding, BOM and line endings,
so this module only decides whether a file is text and how to put new bytes in its place.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import signal
import tempfile
import tokenize
from pathlib import Path


TEMP_SUFFIX = ".pmap-migrate.tmp"


def remove_stale_temporaries(path: Path) -> None:
    """A run killed with SIGKILL between writing and renaming leaves its temporary file; the
    next write of the same file removes it (the target itself was never half-written)."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            stale.unlink()


class NotText(Exception):
    def __init__(self, message: str, line: int = 1):
        super().__init__(message)
        self.line = line


def source_encoding(data: bytes) -> str:
    """The encoding Python would use for `data` (cookie or BOM, else utf-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise NotText(str(error)) from None
    return encoding


def lossless_codec(encoding: str) -> str:
    """The codec that turns the file's bytes into text and back byte for byte. For a file
    with a UTF-8 BOM that is plain utf-8: the BOM stays in the text as U+FEFF at the start
    of the first line, where a diff must show it (utf-8-sig would drop it on decoding and put
    it back in front of whatever text is encoded, such as a diff's `--- a/` header)."""
    return "utf-8" if encoding.lower().replace("_", "-") == "utf-8-sig" else encoding


def check_text(data: bytes) -> str:
    """Raise NotText for binary data or bytes invalid in the declared encoding; return it."""
    if b"\0" in data[:8192]:
        raise NotText("binary file (contains NUL bytes)")
    encoding = source_encoding(data)
    try:
        data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise NotText(f"not valid {encoding}: {error.reason} at byte {error.start}", line) from None
    except LookupError:
        raise NotText(f"unknown encoding {encoding!r}") from None
    return encoding


def atomic_write(path: Path, data: bytes, *, expected_original: bytes | None = None) -> None:
    """Replace `path` by `data` in one rename, keeping its mode.

    The new bytes go to a temporary file beside the target, are flushed to disk, and then
    renamed over it, so a reader (or a crash) sees the old file or the new one, never half.
    With `expected_original`, refuse when the file changed since it was read.
    """
    if expected_original is not None and path.exists() and path.read_bytes() != expected_original:
        raise OSError(f"{path} changed while pmap-migrate was running; not written")
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    remove_stale_temporaries(path)
    # A SIGTERM or Ctrl-C that lands inside mkstemp, after the file exists but before its
    # name is known here, would leave it behind: the signals wait until `tmp` is set.
    deferred = _defer_interrupts()
    tmp = None
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX,
                                       dir=path.parent)
        finally:
            _restore_interrupts(deferred)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise


_INTERRUPTS = {signal.SIGINT, signal.SIGTERM}


def _defer_interrupts():
    """Block SIGINT / SIGTERM in this thread (where the platform can); the old mask."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)


def _restore_interrupts(mask) -> None:
    """Undo `_defer_interrupts`: a signal that arrived meanwhile is handled now."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
