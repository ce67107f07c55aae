"""--helper-module: the helpers written once into the user's package, imported by each module.

Tested on tests/packages/trainpkg, a package of several modules: migrated, idempotent, the
diff appliable with git, the migrated package run on 8 fake devices and checked equivalent to
the original under legacy jax, and every unusable helper module refused before writing.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import legacy_python_or_skip
from test_cli import SIMPLE, cli
from transforms.helpers.helper_templates import MARKER_LINE, helper_text

PACKAGE = Path(__file__).resolve().parent / "packages" / "trainpkg"
MODULE = "trainpkg._pmap_helpers"


def project(tmp_path: Path, name: str = "proj") -> Path:
    root = tmp_path / name
    shutil.copytree(PACKAGE, root / "trainpkg")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*.py")) if ".git" not in p.parts}


def functions(source: bytes) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


def test_apply_writes_the_helpers_once_and_each_module_imports_them(tmp_path):
    root = project(tmp_path)
    result = cli("apply", "trainpkg", "--helper-module", MODULE, cwd=root)
    assert result.returncode == 0, result.stderr
    assert b"trainpkg/_pmap_helpers.py: helper module trainpkg._pmap_helpers created" in result.stderr
    files = snapshot(root)
    shared = files["trainpkg/_pmap_helpers.py"]
    assert functions(shared) == [
        "_pmap_style_shard_map", "_pmap_compat", "_device_put_replicated"]
    assert shared.count(MARKER_LINE.encode()) == 3
    assert helper_text("_pmap_compat").encode() in shared
    imports = {
        "trainpkg/model.py": "from trainpkg._pmap_helpers import _pmap_style_shard_map\n",
        "trainpkg/parallel.py": "from trainpkg._pmap_helpers import _pmap_compat\n",
        "trainpkg/train.py":
            "from trainpkg._pmap_helpers import _device_put_replicated, _pmap_style_shard_map\n",
    }
    for name, line in imports.items():
        assert line.encode() in files[name], name
        assert not functions(files[name]) or "_pmap" not in " ".join(functions(files[name]))
        assert MARKER_LINE.encode() not in files[name]
    # The second run changes nothing, the helper module included.
    again = cli("apply", "trainpkg", "--helper-module", MODULE, cwd=root)
    assert again.returncode == 0, again.stderr
    assert b"0 changed" in again.stderr and b"helper module" not in again.stderr
    assert snapshot(root) == files
    assert cli("diff", "trainpkg", "--helper-module", MODULE, cwd=root).stdout == b""


def test_diff_shows_the_module_as_a_new_file_and_git_applies_it(tmp_path):
    applied = project(tmp_path, "applied")
    assert cli("apply", "trainpkg", "--helper-module", MODULE, cwd=applied).returncode == 0
    root = project(tmp_path)
    result = cli("diff", "trainpkg", "--helper-module", MODULE, cwd=root)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(b"--- /dev/null\n+++ b/trainpkg/_pmap_helpers.py\n@@ -0,0 +1,")
    (root / "change.patch").write_bytes(result.stdout)
    subprocess.run(["git", "apply", "change.patch"], cwd=root, check=True)
    (root / "change.patch").unlink()
    assert snapshot(root) == snapshot(applied)


def test_config_key_and_an_existing_module_gets_only_what_is_missing(tmp_path):
    root = project(tmp_path)
    (root / "pyproject.toml").write_text(f'[tool.pmap-migrate]\nhelper-module = "{MODULE}"\n')
    existing = b'"""Our helpers."""\n\n\ndef mine():\n    return 1\n'
    (root / "trainpkg" / "_pmap_helpers.py").write_bytes(existing)
    result = cli("apply", "trainpkg", cwd=root)
    assert result.returncode == 0, result.stderr
    assert b"helper module trainpkg._pmap_helpers updated" in result.stderr
    shared = (root / "trainpkg" / "_pmap_helpers.py").read_bytes()
    assert shared.startswith(existing)
    assert functions(shared) == [
        "mine", "_pmap_style_shard_map", "_pmap_compat", "_device_put_replicated"]


def test_out_dir_gets_the_module_and_the_source_tree_is_untouched(tmp_path):
    root = project(tmp_path)
    before = snapshot(root)
    result = cli("apply", "trainpkg", "--helper-module", MODULE, "--out-dir", tmp_path / "out",
                 cwd=root)
    assert result.returncode == 0, result.stderr
    assert snapshot(root) == before
    assert functions((tmp_path / "out" / "_pmap_helpers.py").read_bytes())[0] == "_pmap_style_shard_map"


def test_notebooks_keep_their_own_helpers(tmp_path):
    import json

    root = project(tmp_path)
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": ["import jax\n", "f = jax.pmap(lambda x: x * 2)\n"]}
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (root / "trainpkg" / "explore.ipynb").write_text(json.dumps(notebook))
    result = cli("apply", "trainpkg", "--helper-module", MODULE, cwd=root)
    assert result.returncode == 0, result.stderr
    migrated = json.loads((root / "trainpkg" / "explore.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in migrated["cells"])
    assert "def _pmap_style_shard_map(" in code and MODULE not in code


@pytest.mark.parametrize("module, paths, message", [
    ("otherpkg.helpers", ["trainpkg"], b"package otherpkg not found"),
    ("helpers", ["trainpkg"], b"which is not under the paths given"),
    ("trainpkg.model.helpers", ["trainpkg"], b"package trainpkg.model not found"),
    ("trainpkg", ["."], b"is a package, not a module"),
    ("trainpkg.2bad", ["trainpkg"], b"is not a dotted module name"),
])
def test_an_unusable_module_is_refused_before_anything_is_written(tmp_path, module, paths, message):
    root = project(tmp_path)
    before = snapshot(root)
    for command in ("apply", "diff"):
        result = cli(command, *paths, "--helper-module", module, cwd=root)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr, result.stderr
        assert result.stdout == b""
    assert snapshot(root) == before


def test_a_file_that_could_not_import_the_module_is_refused_before_anything_is_written(tmp_path):
    root = project(tmp_path)
    (root / "scripts").mkdir()
    (root / "scripts" / "train.py").write_bytes(SIMPLE)
    before = snapshot(root)
    result = cli("apply", ".", "--helper-module", MODULE, cwd=root)
    assert result.returncode == 2
    assert (b"scripts/train.py: cannot import trainpkg._pmap_helpers: the file is imported from "
            b"scripts, the helper module from ." in result.stderr), result.stderr
    assert b"nothing written" in result.stderr
    assert snapshot(root) == before
    diff = cli("diff", ".", "--helper-module", MODULE, cwd=root)
    assert diff.returncode == 2 and diff.stdout == b""


def test_the_migrated_package_runs_and_checks_equivalent_on_8_devices(tmp_path):
    legacy = legacy_python_or_skip()
    original = project(tmp_path, "original")
    migrated = project(tmp_path, "migrated")
    assert cli("apply", "trainpkg", "--helper-module", MODULE, cwd=migrated).returncode == 0
    result = cli("check", original, migrated, "--entry", "trainpkg.entry:run", "--devices", "8",
                 "--reference-python", legacy)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"trainpkg.entry:run [8 devices]: equivalent" in result.stdout


def test_interactive_apply_writes_only_the_helpers_accepted_hunks_use(tmp_path):
    """Through a real pty: accept the first hunk (model.py), then quit. model.py imports the
    1-D helper, which alone goes into the module; the other files are untouched."""
    import os
    import pty
    import select
    import sys

    root = project(tmp_path)
    before = snapshot(root)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "migrator.cli", "apply", "trainpkg", "--interactive",
         "--helper-module", MODULE],
        stdin=follower, stdout=follower, stderr=follower, cwd=root,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )
    os.close(follower)
    seen, answers = b"", [b"y\n", b"q\n"]
    while process.poll() is None:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                seen += os.read(leader, 4096)
            except OSError:
                break
        if answers and seen.count(b"Apply this hunk?") > 2 - len(answers):
            os.write(leader, answers.pop(0))
    process.wait(timeout=120)
    os.close(leader)
    assert not answers and process.returncode == 0, seen.decode(errors="replace")
    after = snapshot(root)
    assert functions(after["trainpkg/_pmap_helpers.py"]) == ["_pmap_style_shard_map"]
    assert b"from trainpkg._pmap_helpers import _pmap_style_shard_map\n" in after["trainpkg/model.py"]
    for name in ("trainpkg/parallel.py", "trainpkg/train.py", "trainpkg/entry.py"):
        assert after[name] == before[name], name


def test_global_style_imports_the_contract_functions_and_runs_equivalent(tmp_path):
    """--style global: sites kept on pmap's calling contract import `_per_device_shard_map`
    from the helper module, which holds the contract functions once, above the faithful
    helpers; the second run changes nothing and the package checks equivalent."""
    legacy = legacy_python_or_skip()
    original = project(tmp_path, "original")
    root = project(tmp_path, "migrated")
    result = cli("apply", "trainpkg", "--style", "global", "--helper-module", MODULE, cwd=root)
    assert result.returncode == 0, result.stderr
    files = snapshot(root)
    shared = files["trainpkg/_pmap_helpers.py"]
    assert functions(shared)[:3] == ["_pmap_mesh", "_per_device_shard_map", "_across_processes"]
    for name in ("trainpkg/model.py", "trainpkg/train.py"):
        imported = {a.name for node in ast.parse(files[name]).body
                    if isinstance(node, ast.ImportFrom) and node.module == MODULE for a in node.names}
        assert "_per_device_shard_map" in imported, name
        assert "_across_processes" not in imported and "_pmap_mesh" not in imported
        assert b"def _per_device_shard_map" not in files[name] and b"jax.pmap" not in files[name]
    again = cli("apply", "trainpkg", "--style", "global", "--helper-module", MODULE, cwd=root)
    assert again.returncode == 0, again.stderr
    assert b"0 changed" in again.stderr and snapshot(root) == files
    result = cli("check", original, root, "--entry", "trainpkg.entry:run", "--devices", "8",
                 "--reference-python", legacy)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"trainpkg.entry:run [8 devices]: equivalent" in result.stdout


def test_a_later_global_run_reuses_the_contract_functions_it_imported(tmp_path):
    """A module migrated with --helper-module imports `_per_device_shard_map`; a pmap added to
    it later is rewritten to call that same import, not `... as _per_device_shard_map_2`, and
    a run after that changes nothing."""
    root = project(tmp_path)
    command = ("apply", "trainpkg", "--style", "global", "--helper-module", MODULE)
    assert cli(*command, cwd=root).returncode == 0
    model = root / "trainpkg" / "model.py"
    imports = [line for line in model.read_text().splitlines() if MODULE in line]
    assert imports == [f"from {MODULE} import _per_device_shard_map"]
    model.write_text(model.read_text() + "\n\nidentity = jax.pmap(lambda x: x)\n")
    result = cli(*command, cwd=root)
    assert result.returncode == 0, result.stderr
    migrated = model.read_text()
    assert [line for line in migrated.splitlines() if MODULE in line] == imports
    assert "_2" not in migrated and "jax.pmap" not in migrated
    assert "    _per_device_shard_map(lambda x: x, \"devices\"," in migrated
    files = snapshot(root)
    again = cli(*command, cwd=root)
    assert b"0 changed" in again.stderr and snapshot(root) == files


@pytest.mark.parametrize("out_dir", [False, True])
def test_a_read_only_helper_module_is_refused_and_its_importers_kept(tmp_path, out_dir):
    """A write-protected helper module (in place, or an --out-dir copy with other contents)
    gets PM008 and keeps its bytes and mode; each file that would import a helper it lacks
    keeps its original (PM008 too), so no file imports a missing name; exit 1."""
    import stat

    root = project(tmp_path)
    existing = b'"""Our helpers."""\n'
    target = (tmp_path / "out" if out_dir else root / "trainpkg") / "_pmap_helpers.py"
    target.parent.mkdir(exist_ok=True)
    (root / "trainpkg" / "_pmap_helpers.py").write_bytes(existing)
    target.write_bytes(existing)
    target.chmod(0o444)
    before = snapshot(root)
    extra = ("--out-dir", tmp_path / "out") if out_dir else ()
    result = cli("apply", "trainpkg", "--helper-module", MODULE, *extra, cwd=root)
    assert result.returncode == 1, result.stderr
    assert target.read_bytes() == existing and stat.S_IMODE(target.stat().st_mode) == 0o444
    stderr = result.stderr.decode()
    shown = f"{target.as_posix()} " if out_dir else ""
    assert "PM008 warning not written:" in stderr and "read-only (mode 0444)" in stderr
    assert stderr.count(f"_pmap_helpers.py:1:1: PM008 warning not written: {shown}") == 1, stderr
    for name in ("model", "parallel", "train"):
        assert (f"trainpkg/{name}.py:1:1: PM008 warning not written: it would import "
                in stderr), stderr
    assert "helper module trainpkg._pmap_helpers" not in stderr
    assert "0 changed" in stderr
    assert snapshot(root) == before
    if out_dir:  # the held-back files are copied as they are
        assert (tmp_path / "out" / "model.py").read_bytes() == before["trainpkg/model.py"]
    else:  # once the module is open for edit, the migration goes through
        target.chmod(0o644)
        assert cli("apply", "trainpkg", "--helper-module", MODULE, cwd=root).returncode == 0
        assert b"_pmap_compat" in target.read_bytes()


def test_a_read_only_out_dir_copy_of_the_module_that_is_not_python_is_refused_cleanly(tmp_path):
    root = project(tmp_path)
    target = tmp_path / "out" / "_pmap_helpers.py"
    target.parent.mkdir()
    target.write_bytes(b"\xff not python (\n")
    target.chmod(0o444)
    result = cli("apply", "trainpkg", "--helper-module", MODULE, "--out-dir", tmp_path / "out",
                 cwd=root)
    assert result.returncode == 1, result.stderr
    assert b"Traceback" not in result.stderr and b"PM008" in result.stderr
    assert target.read_bytes() == b"\xff not python (\n"
    assert b"_pmap_helpers" not in (tmp_path / "out" / "model.py").read_bytes()
