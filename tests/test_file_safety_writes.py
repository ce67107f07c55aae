"""What `apply` keeps of a file besides its bytes: owner and group, hard links (the inode),
and a read-only file's wish not to be written."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT
from migrator.files import SourceFile
from migrator.options import MigrationOptions
from migrator.runner import process, write_result
from migrator.textio import BACKUP_SUFFIX, TEMP_SUFFIX, atomic_write

SITE = b"import jax\n\n\n@jax.pmap\ndef f(x):\n    return x * %d\n"
MIGRATED_MARK = b"_pmap_style_shard_map"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file away")


def _apply(*args):
    return subprocess.run([sys.executable, "-m", "migrator.cli", "apply", *map(str, args),
                           "--no-progress"], cwd=ROOT, capture_output=True, timeout=120)


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.endswith((TEMP_SUFFIX, BACKUP_SUFFIX))]


@needs_root
def test_owner_group_and_mode_are_kept(tmp_path):
    nobody, nogroup = pwd.getpwnam("nobody")[2:4]  # nobody:nogroup on Debian
    path = tmp_path / "owned.py"
    path.write_bytes(SITE % 1)
    os.chown(path, nobody, nogroup)
    path.chmod(0o640)
    result = _apply(path)
    assert result.returncode == 0, result.stderr
    assert MIGRATED_MARK in path.read_bytes()
    after = path.stat()
    assert (after.st_uid, after.st_gid) == (nobody, nogroup)
    assert stat.S_IMODE(after.st_mode) == 0o640


def test_group_is_kept_where_the_owner_cannot_be(tmp_path, monkeypatch):
    """Without the right to give the file away, the group is still tried on its own."""
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")
    calls = []

    def fchown(fd, uid, gid):
        calls.append((uid, gid))
        if uid != -1:
            raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", fchown)
    atomic_write(path, b"new\n")
    before = path.stat()
    assert path.read_bytes() == b"new\n"
    assert calls == [(before.st_uid, before.st_gid), (-1, before.st_gid)]


def test_hard_link_sees_the_new_contents_and_the_inode_is_kept(tmp_path):
    path = tmp_path / "linked.py"
    path.write_bytes(SITE % 2)
    path.chmod(0o640)
    other = tmp_path / "other_name.py"
    os.link(path, other)
    inode = path.stat().st_ino
    result = _apply(path)
    assert result.returncode == 0, result.stderr
    assert MIGRATED_MARK in path.read_bytes()
    assert other.read_bytes() == path.read_bytes()
    assert path.stat().st_ino == inode and path.stat().st_nlink == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_failed_in_place_write_puts_the_original_back(tmp_path, monkeypatch):
    """Disk full in the middle of rewriting a hard-linked file: the original comes back and
    no backup is left."""
    import migrator.textio as textio

    path = tmp_path / "linked.py"
    path.write_bytes(b"original\n")
    os.link(path, tmp_path / "other.py")
    real = textio._overwrite

    def full_disk_once(target, data):
        if data == b"new contents\n":
            with open(target, "r+b") as handle:
                handle.write(b"new c")  # half written, then the disk is full
            raise OSError(28, "No space left on device")
        real(target, data)

    monkeypatch.setattr(textio, "_overwrite", full_disk_once)
    with pytest.raises(OSError, match="No space"):
        atomic_write(path, b"new contents\n", expected_original=b"original\n")
    assert path.read_bytes() == b"original\n" == (tmp_path / "other.py").read_bytes()
    assert _leftovers(tmp_path) == []


def test_backup_of_a_killed_in_place_write_stops_the_next_write(tmp_path):
    """A SIGKILL in the middle of an in-place write leaves the original's backup: the next
    run names it (PM006) instead of writing over what may be half-written."""
    path = tmp_path / "a.py"
    path.write_bytes(SITE % 3)
    os.link(path, tmp_path / "b.py")
    backup = tmp_path / f".a.py.x1y2z3_4{BACKUP_SUFFIX}"
    backup.write_bytes(SITE % 3)
    result = process(SourceFile(path, tmp_path, "a.py"), MigrationOptions())
    write_result(result, None)
    assert path.read_bytes() == SITE % 3
    assert result.findings[-1].code == "PM006"
    assert backup.name in result.findings[-1].message


def test_leftovers_of_a_longer_name_are_not_taken_for_the_files_own(tmp_path):
    """`a.py`'s temporary files and backups are `.a.py.` + 8 characters + the suffix: those
    of `a.py.orig.py` in the same folder neither block nor get removed by a write of a.py."""
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")
    os.link(path, tmp_path / "b.py")
    others = [tmp_path / f".a.py.orig.py.abcd1234{BACKUP_SUFFIX}",
              tmp_path / f".a.py.orig.py.abcd1234{TEMP_SUFFIX}"]
    for other in others:
        other.write_bytes(b"not a.py's\n")
    atomic_write(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert all(other.exists() for other in others)
    stale = tmp_path / f".a.py.zz99_x1y{TEMP_SUFFIX}"
    stale.write_bytes(b"left by a killed run\n")
    (tmp_path / "b.py").unlink()  # one link again: the rename path, which removes it
    atomic_write(path, b"newer\n")
    assert not stale.exists() and all(other.exists() for other in others)


@pytest.mark.parametrize("mode", [0o444, 0o555, 0o044])
def test_read_only_file_is_refused_and_the_run_goes_on(mode, tmp_path):
    locked, free = tmp_path / "locked.py", tmp_path / "free.py"
    locked.write_bytes(SITE % 4)
    free.write_bytes(SITE % 5)
    locked.chmod(mode)
    inode = locked.stat().st_ino
    result = _apply(tmp_path)
    assert result.returncode == 1, result.stderr  # the migration is still pending
    assert locked.read_bytes() == SITE % 4
    assert locked.stat().st_ino == inode and stat.S_IMODE(locked.stat().st_mode) == mode
    assert MIGRATED_MARK in free.read_bytes()
    stderr = result.stderr.decode()
    assert f"locked.py:1:1: PM008 warning not written: read-only (mode {mode:04o})" in stderr
    assert "2 files, 1 changed" in stderr


def test_read_only_file_that_needs_no_change_says_nothing(tmp_path):
    path = tmp_path / "done.py"
    path.write_bytes(b"import jax\nx = jax.jit(abs)\n")
    path.chmod(0o444)
    result = _apply(path)
    assert result.returncode == 0, result.stderr
    assert b"PM008" not in result.stderr


def test_out_dir_refuses_an_existing_read_only_destination_with_other_contents(tmp_path):
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    (source / "a.py").write_bytes(SITE % 6)
    (source / "b.py").write_bytes(SITE % 7)
    (source / "b.py").chmod(0o444)
    first = _apply(source, "--out-dir", out)
    assert first.returncode == 0, first.stderr  # the source is never written
    assert stat.S_IMODE((out / "b.py").stat().st_mode) == 0o444  # the source's mode, kept
    # A second run over the same copy has nothing to write there.
    again = _apply(source, "--out-dir", out)
    assert again.returncode == 0, again.stderr
    assert b"PM008" not in again.stderr
    # A read-only destination with other contents is not overwritten.
    (out / "a.py").write_bytes(b"# the user's own copy\n")
    (out / "a.py").chmod(0o444)
    third = _apply(source, "--out-dir", out)
    assert third.returncode == 1, third.stderr
    assert (out / "a.py").read_bytes() == b"# the user's own copy\n"
    assert b"PM008 warning not written: " in third.stderr and b"read-only (mode 0444)" in third.stderr


def test_diff_shows_a_read_only_files_patch(tmp_path):
    """diff only shows: a read-only file's patch is printed as any other."""
    path = tmp_path / "ro.py"
    path.write_bytes(SITE % 8)
    path.chmod(0o444)
    result = subprocess.run([sys.executable, "-m", "migrator.cli", "diff", str(path)],
                            cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 1 and b"+++ b/" in result.stdout
    assert b"PM008" not in result.stderr


@needs_root
def test_a_file_another_user_owns_is_not_replaced_through_the_directory():
    """As `nobody`, in a directory nobody may write, a 0644 file of root's is refused: the
    rename would have replaced it, though its owner never let anyone else write it."""
    nobody = pwd.getpwnam("nobody")
    folder = Path(tempfile.mkdtemp())  # pytest's own folders are root's alone
    try:
        folder.chmod(0o777)
        path = folder / "roots.py"
        path.write_bytes(SITE % 9)
        path.chmod(0o644)
        script = (
            "import os, sys\n"
            "from pathlib import Path\n"
            "import transforms.pipeline\n"
            "from migrator.files import SourceFile\n"
            "from migrator.options import MigrationOptions\n"
            "from migrator.runner import process, write_result\n"
            "path = Path(sys.argv[1])\n"
            "result = process(SourceFile(path, path.parent, 'roots.py'), MigrationOptions())\n"
            f"os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid})\n"
            "write_result(result, None)\n"
            "print(result.findings[-1].to_text())\n"
        )
        run = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert run.returncode == 0, run.stderr
        assert "PM008 warning not written: not writable by this user" in run.stdout
        assert path.read_bytes() == SITE % 9 and path.stat().st_uid == 0
    finally:
        shutil.rmtree(folder)


def test_out_dir_refuses_a_read_only_destination_of_a_copied_file(tmp_path):
    """Files --out-dir copies unchanged (data, excluded code) follow the same rule: a
    read-only destination with other contents gets PM008 and keeps its bytes and mode."""
    source, out = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    (source / "a.py").write_bytes(SITE % 8)
    (source / "data.txt").write_bytes(b"new data\n")
    (source / "same.txt").write_bytes(b"same\n")
    out.mkdir()
    (out / "data.txt").write_bytes(b"the user's own data\n")
    (out / "data.txt").chmod(0o444)
    (out / "same.txt").write_bytes(b"same\n")
    (out / "same.txt").chmod(0o444)
    result = _apply(source, "--out-dir", out)
    assert result.returncode == 1, result.stderr
    assert (out / "data.txt").read_bytes() == b"the user's own data\n"
    assert stat.S_IMODE((out / "data.txt").stat().st_mode) == 0o444
    stderr = result.stderr.decode()
    assert "data.txt:1:1: PM008 warning not written: " in stderr
    assert "out/data.txt read-only (mode 0444)" in stderr
    assert "same.txt" not in stderr  # already the same bytes: nothing to write
    assert MIGRATED_MARK in (out / "a.py").read_bytes()  # the run went on
