"""The command line as a user runs it: exit codes, appliable diffs, safe writes, bad input."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

SIMPLE = b'''import functools
import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, None))
def step(x, w):
    return lax.psum(x * w, "i")
'''
REFUSED = b"import jax\n\nf = jax.pmap(lambda x: x, in_axes=-1)\n"


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "migrator.cli", *map(str, args)],
        cwd=cwd or ROOT, capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def leftovers(tree: Path) -> list[str]:
    return [p.name for p in tree.rglob("*") if p.name.endswith(".pmap-migrate.tmp")]


def test_diff_is_appliable_with_git_and_then_clean(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_bytes(SIMPLE)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    result = cli("diff", "pkg", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(b"--- a/pkg/train.py\n+++ b/pkg/train.py\n")
    assert b"pkg/train.py:6:2: PM100 info" in result.stderr
    (tmp_path / "change.patch").write_bytes(result.stdout)
    subprocess.run(["git", "apply", "change.patch"], cwd=tmp_path, check=True)
    again = cli("diff", "pkg", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == b""


def test_apply_keeps_encoding_bom_line_endings_and_mode(tmp_path):
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(SIMPLE.replace(b"\n", b"\r\n"))
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + SIMPLE)
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SIMPLE)
    os.chmod(crlf, 0o755)
    result = cli("apply", tmp_path)
    assert result.returncode == 0, result.stderr
    new_crlf = crlf.read_bytes()
    assert b"_pmap_style_shard_map" in new_crlf
    assert new_crlf.count(b"\n") == new_crlf.count(b"\r\n"), "every line ending stays CRLF"
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o755
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf") and b"_pmap_style" in bom.read_bytes()
    assert b"# caf\xe9\n" in latin.read_bytes() and b"_pmap_style" in latin.read_bytes()
    assert leftovers(tmp_path) == []


def test_apply_twice_equals_apply_once(tmp_path):
    target = tmp_path / "a.py"
    target.write_bytes(SIMPLE)
    assert cli("apply", target).returncode == 0
    once = target.read_bytes()
    second = cli("apply", target)
    assert second.returncode == 0
    assert target.read_bytes() == once
    assert b"0 changed" in second.stderr


def test_bad_files_are_reported_and_the_run_goes_on(tmp_path):
    (tmp_path / "good.py").write_bytes(SIMPLE)
    (tmp_path / "broken.py").write_bytes(b"import jax\ndef f(:\n    jax.pmap(f)\n")
    (tmp_path / "binary.py").write_bytes(b"\x00\x01\x02pmap\xff")
    (tmp_path / "bad_utf8.py").write_bytes(b"import jax\nx = '\xff\xfe'  # pmap\n")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name not in ("good.py", "dangling.py", "loop.py")}
    result = cli("apply", tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 2
    assert f"{tmp_path}/broken.py:2:" in err and "PM001" in err
    assert f"{tmp_path}/binary.py:1:1: PM002" in err
    assert f"{tmp_path}/bad_utf8.py:2:1: PM002" in err
    assert f"{tmp_path}/dangling.py:1:1: PM003" in err
    assert f"{tmp_path}/loop.py:1:1: PM003" in err
    assert b"_pmap_style_shard_map" in (tmp_path / "good.py").read_bytes()
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} was touched"


def test_symlinks_are_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "lib.py").write_bytes(SIMPLE)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link.py").symlink_to(outside / "lib.py")
    result = cli("apply", tree)
    assert result.returncode == 0, result.stderr
    assert b"PM007" in result.stderr
    assert (outside / "lib.py").read_bytes() == SIMPLE


def test_out_dir_writes_migrated_tree_and_copies_the_rest(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "train.py").write_bytes(SIMPLE)
    (src / "plain.py").write_bytes(b"x = 1\n")
    (src / "data.txt").write_bytes(b"keep me")
    out = tmp_path / "out"
    result = cli("apply", src, "--out-dir", out)
    assert result.returncode == 0, result.stderr
    assert (src / "sub" / "train.py").read_bytes() == SIMPLE
    assert b"_pmap_style_shard_map" in (out / "sub" / "train.py").read_bytes()
    assert (out / "plain.py").read_bytes() == b"x = 1\n"
    assert (out / "data.txt").read_bytes() == b"keep me"


def test_sites_needing_a_human_exit_1_and_are_left_alone(tmp_path):
    target = tmp_path / "neg.py"
    target.write_bytes(REFUSED)
    result = cli("apply", target)
    assert result.returncode == 1
    assert b"neg.py:3:5: PM201 warning" in result.stderr
    assert target.read_bytes() == REFUSED


def test_scan_json_lists_every_site(tmp_path):
    (tmp_path / "a.py").write_bytes(SIMPLE)
    (tmp_path / "b.py").write_bytes(REFUSED)
    result = cli("scan", tmp_path, "--format", "json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["schema_version"] == 2
    codes = sorted((Path(f["path"]).name, f["code"], f["line"]) for f in document["findings"])
    assert codes == [("a.py", "PM100", 6), ("b.py", "PM201", 3)]
    assert document["summary"]["needs_human"] == 1
    assert (tmp_path / "a.py").read_bytes() == SIMPLE, "scan never writes"


def snapshot(tree: Path) -> dict[str, tuple[bytes, int]]:
    """Every path under `tree` with its bytes (b"" for a folder) and mtime."""
    return {str(p.relative_to(tree)): (p.read_bytes() if p.is_file() else b"",
                                       p.stat().st_mtime_ns) for p in sorted(tree.rglob("*"))}


def test_clean_tree_exits_0(tmp_path):
    """Nothing to migrate: exit 0, nothing written (bytes and mtimes), nothing on stdout."""
    (tmp_path / "a.py").write_bytes(b"import jax\nf = jax.jit(lambda x: x)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_bytes(b"x = 1\r\n")
    for path in (tmp_path / "a.py", tmp_path / "pkg" / "b.py", tmp_path / "pkg"):
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))  # 2001
    before = snapshot(tmp_path)
    for command in ("diff", "scan", "apply"):
        done = cli(command, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == b"", command
        assert snapshot(tmp_path) == before, command


@pytest.mark.parametrize("args", [["diff", "x.py", "--target-jax", "banana"], ["nonsense"]])
def test_bad_arguments_exit_2(args, tmp_path):
    (tmp_path / "x.py").write_bytes(b"")
    assert cli(*args, cwd=tmp_path).returncode == 2


def test_old_target_uses_experimental_shard_map(tmp_path):
    target = tmp_path / "a.py"
    target.write_bytes(SIMPLE)
    result = cli("diff", target, "--target-jax", "0.4.38")
    assert b"from jax.experimental.shard_map import shard_map" in result.stdout
    assert b"check_rep=False" in result.stdout


def test_project_config_excludes_ignores_and_targets(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pmap-migrate]\n'
        'extend-exclude = ["generated"]\n'
        'target-jax = "0.4.38"\n'
        'ignore = ["PM2"]\n'
        '[tool.pmap-migrate.per-path."legacy/*.py"]\n'
        'ignore = ["PM100"]\n'
    )
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "g.py").write_bytes(SIMPLE)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_bytes(SIMPLE)
    (tmp_path / "a.py").write_bytes(SIMPLE)
    (tmp_path / "neg.py").write_bytes(REFUSED)
    result = cli("apply", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # PM201 is ignored by the project
    assert b"check_rep=False" in (tmp_path / "a.py").read_bytes(), "target-jax from pyproject"
    assert (tmp_path / "generated" / "g.py").read_bytes() == SIMPLE, "excluded"
    assert (tmp_path / "legacy" / "old.py").read_bytes() == SIMPLE, "PM100 ignored there"
    assert b"neg.py" not in result.stderr
    (tmp_path / "c.py").write_bytes(SIMPLE)
    flag = cli("diff", "c.py", "--target-jax", "0.10", cwd=tmp_path)
    assert b"check_vma=False" in flag.stdout, "the command-line flag beats the file"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "pyproject.toml").write_text('[tool.pmap-migrate]\ntarget_jax = "0.10"\n')
    (bad / "x.py").write_bytes(SIMPLE)
    broken = cli("scan", ".", cwd=bad)
    assert broken.returncode == 2 and b"target_jax" in broken.stderr


@pytest.mark.parametrize("format", ["sarif", "github", "junit", "json"])
def test_scan_formats_from_the_command_line(format, tmp_path):
    (tmp_path / "a.py").write_bytes(SIMPLE)
    (tmp_path / "b.py").write_bytes(REFUSED)
    result = cli("scan", tmp_path, "--format", format)
    assert result.returncode == 1
    out = result.stdout.decode()
    if format == "sarif":
        document = json.loads(out)
        assert sorted(r["ruleId"] for r in document["runs"][0]["results"]) == ["PM100", "PM201"]
        assert any("fixes" in r for r in document["runs"][0]["results"])
    elif format == "github":
        assert "::notice file=" in out and "::warning file=" in out and "title=PM201" in out
    elif format == "junit":
        import xml.etree.ElementTree as ET

        assert ET.fromstring(out).get("failures") == "1"
    else:
        assert json.loads(out)["summary"]["needs_human"] == 1


def test_diff_colour_only_when_asked_or_on_a_terminal(tmp_path):
    (tmp_path / "a.py").write_bytes(SIMPLE)
    plain = cli("diff", tmp_path)
    assert b"\x1b[" not in plain.stdout
    coloured = cli("diff", tmp_path, "--color", "-U", "1")
    assert b"\x1b[31m-@functools.partial(jax.pmap" in coloured.stdout


def test_interactive_apply_refuses_without_a_terminal(tmp_path):
    (tmp_path / "a.py").write_bytes(SIMPLE)
    result = cli("apply", tmp_path, "--interactive")
    assert result.returncode == 2
    assert b"terminal" in result.stderr.lower() or b"tty" in result.stderr.lower()
    assert (tmp_path / "a.py").read_bytes() == SIMPLE


def test_interactive_apply_through_a_pseudo_terminal(tmp_path):
    """The real command in a pty: answer 'y' to the only site; the file is rewritten."""
    import pty
    import select

    (tmp_path / "a.py").write_bytes(SIMPLE)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "migrator.cli", "apply", str(tmp_path), "--interactive"],
        stdin=follower, stdout=follower, stderr=follower, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    os.close(follower)
    seen, answered = b"", False
    while process.poll() is None:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                seen += os.read(leader, 4096)
            except OSError:
                break
        if not answered and b"?" in seen:
            os.write(leader, b"y\n")
            answered = True
    process.wait(timeout=60)
    os.close(leader)
    assert answered, seen.decode(errors="replace")
    assert process.returncode == 0, seen.decode(errors="replace")
    assert b"_pmap_style_shard_map" in (tmp_path / "a.py").read_bytes()


def test_summary_counts_sites_migrated_in_either_style(tmp_path):
    """A site the global style rewrites (PM600) is a migrated site as much as a faithful one
    (PM100): the summary line counted only the latter, so fully global files showed 0."""
    program = tmp_path / "step.py"
    program.write_text(
        "import functools\n\nimport jax\nimport numpy as np\n\n\n"
        "@functools.partial(jax.pmap, axis_name='i')\ndef total(x):\n"
        "    return jax.lax.psum(x, 'i')\n\n\n"
        "def run():\n    n = jax.local_device_count()\n"
        "    return np.asarray(total(np.ones((n, 2), np.float32)))\n")
    for style in ("faithful", "global"):
        done = subprocess.run([sys.executable, "-m", "migrator.cli", "diff", "--style", style,
                               str(program), "--no-progress"], capture_output=True, text=True,
                              cwd=ROOT)
        assert "1 files, 1 would change, 1 pmap sites migrated" in done.stderr, (style, done.stderr)


@pytest.mark.parametrize("style", ["faithful", "global"])
def test_a_run_imports_neither_libcst_codemod_nor_its_matchers(tmp_path, style):
    """Start-up is most of a small run: libcst.codemod (and the libcst.matchers it imports)
    cost a quarter of a second, and the rules need neither (transforms/imports.py)."""
    program = tmp_path / "step.py"
    program.write_bytes(SIMPLE)
    code = (
        "import sys\nfrom migrator import cli\n"
        f"try:\n    cli.app(['diff', '--style', '{style}', {str(program)!r}, '--no-progress'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('libcst.codemod', 'libcst.matchers'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "1 pmap sites migrated" in done.stderr, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout.splitlines()[-1]
