"""`diff` output is a patch that `git apply` and `patch -p1` take, and applying it gives
exactly the bytes `apply` writes: BOM, CRLF and form feeds included."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

ODD_FILES = {
    "bom_crlf.py": b"\xef\xbb\xbfimport jax\r\nf = jax.pmap(lambda x: x)\r\n",
    "bom_lf.py": b"\xef\xbb\xbfimport jax\n\n\n@jax.pmap\ndef g(x):\n    return x\n",
    # A form feed (Emacs page break), U+2028 and U+0085 in a string are inside a line for
    # git, patch and Python; str.splitlines would cut there.
    "odd_breaks.py": (
        "import jax\n\x0c\nh = jax.pmap(lambda x: x)\ns = 'a\u2028b\x85c'\n".encode()
    ),
    "latin1.py": b"# -*- coding: latin-1 -*-\nimport jax\nname = '\xe9'\nk = jax.pmap(abs)\n",
}


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "migrator.cli", *args, "--no-progress"],
                          cwd=cwd, capture_output=True, env=_env())


def _env():
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def trees(tmp_path):
    """The same files twice: one tree gets the patch, the other `apply`."""
    for name in ("patched", "applied"):
        tree = tmp_path / name
        tree.mkdir()
        for file, data in ODD_FILES.items():
            (tree / file).write_bytes(data)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path / "patched", check=True)
    return tmp_path / "patched", tmp_path / "applied"


def _patch_and_apply(patched, applied):
    made = _cli("diff", *ODD_FILES, cwd=patched)
    assert made.returncode == 1, made.stderr
    assert made.stdout.startswith(b"--- a/"), made.stdout[:40]
    done = _cli("apply", *ODD_FILES, cwd=applied)
    assert done.returncode == 0, done.stderr
    return made.stdout


def test_git_apply_gives_what_apply_writes(trees):
    patched, applied = trees
    patch = _patch_and_apply(patched, applied)
    (patched / "change.patch").write_bytes(patch)
    for args in (["--check"], []):
        run = subprocess.run(["git", "apply", *args, "change.patch"], cwd=patched,
                             capture_output=True)
        assert run.returncode == 0, run.stderr
    for file in ODD_FILES:
        assert (patched / file).read_bytes() == (applied / file).read_bytes(), file
        assert (patched / file).read_bytes() != ODD_FILES[file], file
    written = (applied / "bom_crlf.py").read_bytes()
    assert written.startswith(b"\xef\xbb\xbf#") and written.count(b"\xef\xbb\xbf") == 1
    assert written.count(b"\n") == written.count(b"\r\n")


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) not installed")
def test_patch_p1_gives_what_apply_writes(trees):
    patched, applied = trees
    patch = _patch_and_apply(patched, applied)
    run = subprocess.run(["patch", "-p1", "--binary"], cwd=patched, input=patch,
                         capture_output=True)
    assert run.returncode == 0, run.stdout + run.stderr
    for file in ODD_FILES:
        assert (patched / file).read_bytes() == (applied / file).read_bytes(), file


def test_bom_is_in_the_first_line_of_the_patch():
    from migrator.diffing import unified_diff
    from migrator.textio import lossless_codec

    old = ODD_FILES["bom_crlf.py"]
    codec = lossless_codec("utf-8-sig")
    text = unified_diff(old.decode(codec), (old + b"x = 1\r\n").decode(codec), "m.py")
    assert text.encode(codec).startswith(b"--- a/m.py\n+++ b/m.py\n@@")
    assert " \ufeffimport jax\r\n" in text
