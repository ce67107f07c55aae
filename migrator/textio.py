"""Reading source bytes safely and writing them back atomically, keeping the bytes, mode,
owner, group and hard links.

libcst works on bytes and gives bytes back in the file's own encoding, BOM and line endings,
so this module only decides whether a file is text and how to put new bytes in its place.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import tempfile
import tokenize
from pathlib import Path

from migrator.interrupts import defer_interrupts, restore_interrupts


TEMP_SUFFIX = ".pmap-migrate.tmp"
BACKUP_SUFFIX = ".pmap-migrate.orig"  # an in-place write's copy of the original


def remove_stale_temporaries(path: Path, leftovers: list[Path] | None = None) -> None:
    """A run killed with SIGKILL between writing and renaming leaves its temporary file; the
    next write of the same file removes it (the target itself was never half-written)."""
    for stale in _leftovers(path) if leftovers is None else leftovers:
        if stale.name.endswith(TEMP_SUFFIX):
            with contextlib.suppress(OSError):
                stale.unlink()


def _leftovers(path: Path) -> list[Path]:
    """Temporary files and in-place backups of earlier runs beside `path`, in one listing
    of its directory (a glob per kind cost twice as much in a large one)."""
    # mkstemp's names: the prefix, 8 random characters, the suffix. Exactly that, so that
    # `a.py` never claims what belongs to `a.py.orig.py`.
    own = re.compile(
        rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}(?:{re.escape(TEMP_SUFFIX)}|{re.escape(BACKUP_SUFFIX)})"
    )
    return [path.parent / name for name in sorted(os.listdir(path.parent)) if own.fullmatch(name)]


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


def write_protection(path: Path) -> str | None:
    """Why `path` must not be overwritten, or None. A file without its owner's write bit is
    read-only on purpose (in a Perforce-style checkout it means "not opened for edit"), even
    for root, whom os.access always lets write; a file this user may not write is not
    replaced behind its owner's back through the directory's permission either."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if not mode & stat.S_IWUSR:
        return f"read-only (mode {stat.S_IMODE(mode):04o})"
    if not os.access(path, os.W_OK):
        return "not writable by this user"
    return None


def atomic_write(path: Path, data: bytes, *, expected_original: bytes | None = None) -> None:
    """Replace the contents of `path` by `data`, keeping its mode, owner, group and hard
    links; the old contents are never lost.

    A file with one link: the new bytes go to a temporary file beside it, are flushed to
    disk, given the file's owner, group and mode, and renamed over it, so a reader or a crash
    sees the old file or the new one, never a mix. A file with other hard links is rewritten
    in its own inode instead (`_write_in_place`): a rename would leave the other names on the
    old contents. With `expected_original`, refuse when the file changed since it was read.
    """
    current = path.read_bytes() if path.exists() else None
    if expected_original is not None and current is not None and current != expected_original:
        raise OSError(f"{path} changed while pmap-migrate was running; not written")
    leftovers = _leftovers(path)
    interrupted = next((p for p in leftovers if p.name.endswith(BACKUP_SUFFIX)), None)
    if interrupted is not None:
        raise OSError(
            f"an earlier run was interrupted while rewriting this hard-linked file in place; "
            f"its original is kept in {interrupted.name}: compare, restore or delete it"
        )
    before = path.stat() if current is not None else None
    if before is not None and before.st_nlink > 1:
        _write_in_place(path, data, current)
        return
    remove_stale_temporaries(path, leftovers)
    # A SIGTERM or Ctrl-C that lands inside mkstemp, after the file exists but before its
    # name is known here, would leave it behind: the signals wait until `tmp` is set.
    deferred = defer_interrupts()
    tmp = None
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX,
                                       dir=path.parent)
        finally:
            restore_interrupts(deferred)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if before is not None:
                _keep_owner(handle.fileno(), before)
            # After chown, which clears set-user-ID and set-group-ID bits.
            os.fchmod(handle.fileno(), stat.S_IMODE(before.st_mode) if before else 0o644)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _keep_owner(fd: int, before: os.stat_result) -> None:
    """Give the new file the old one's owner and group, where this process may: root may
    always, a user may keep a group it belongs to, otherwise the rename gives the file to
    the user who ran the tool (as any editor that renames would)."""
    try:
        os.fchown(fd, before.st_uid, before.st_gid)
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, before.st_gid)


def _write_in_place(path: Path, data: bytes, original: bytes) -> None:
    """Overwrite a hard-linked file in its own inode (every name sees the new contents, and
    owner, group and mode are untouched), as editors and formatters do for linked files.

    The original is first written and flushed to a backup beside it; SIGINT and SIGTERM wait
    until the file is whole again. A failed write (disk full) puts the original back; only a
    SIGKILL or a crash in the middle leaves the backup (and maybe a half-written file), and
    the next `apply` refuses to write the file and names the backup. A concurrent reader may
    see a mix for the moment of the write, as with any in-place write.
    """
    deferred = defer_interrupts()
    try:
        fd, backup = tempfile.mkstemp(prefix=f".{path.name}.", suffix=BACKUP_SUFFIX,
                                      dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(original)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            os.unlink(backup)
            raise
        try:
            _overwrite(path, data)
        except OSError as error:
            try:
                _overwrite(path, original)
            except OSError:
                raise OSError(f"{error}; the original is kept in {backup}") from error
            os.unlink(backup)
            raise
        os.unlink(backup)
    finally:
        restore_interrupts(deferred)


def _overwrite(path: Path, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())
