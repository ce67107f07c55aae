"""One options path (migrator/options.py): the configuration and the flags become one
MigrationOptions, resolved per file, and reach `.py` files, notebooks and `check` alike."""

from __future__ import annotations

import ast
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT
from migrator.config_file import load_config
from migrator.options import MigrationOptions
from test_cli import cli
from transforms.target import TargetJax

NOTEBOOKS = ROOT / "tests" / "notebooks"
FAITHFUL_SITE = "import jax\n\nf = jax.pmap(lambda x: x * 2)\n"


def project(root: Path, pyproject: str) -> Path:
    """A project bounded by `.git`, so the configuration search stays in it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".git").mkdir()
    (root / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    return root


def notebook_of(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {},
            "outputs": [], "source": source.splitlines(True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                      indent=1) + "\n"


def test_per_path_settings_are_resolved_by_for_file(tmp_path):
    root = project(tmp_path / "p", '''
        [tool.pmap-migrate]
        style = "global"
        ignore = ["PM304"]
        helper-module = "pkg.helpers"
        respect-gitignore = false
        [tool.pmap-migrate.per-path."legacy/**"]
        ignore = ["PM100"]
        target-jax = "0.4.38"
        [tool.pmap-migrate.per-path."legacy/keep.py"]
        select = ["PM304"]
    ''')
    options = MigrationOptions.from_config(load_config([root]))
    assert (options.style, options.target, options.helper_module, options.respect_gitignore) == (
        "global", TargetJax.parse("0.10"), "pkg.helpers", False)
    assert "PM304" in options.ignored and "PM100" not in options.ignored

    here = options.for_file(root / "pkg" / "train.py")
    assert here.target == TargetJax.parse("0.10") and here.ignored == options.ignored
    legacy = options.for_file(root / "legacy" / "old.py")
    assert legacy.target == TargetJax.parse("0.4.38")
    assert {"PM100", "PM304"} <= legacy.ignored and legacy.style == "global"
    assert "PM304" not in options.for_file(root / "legacy" / "keep.py").ignored

    assert options.for_file(root / "pkg" / "helpers.py").helper_module is None  # itself
    assert options.for_file(root / "pkg" / "explore.ipynb").helper_module is None  # own copy
    assert options.for_file(root / "pkg" / "train.py").helper_module == "pkg.helpers"


def test_flags_win_over_the_configuration(tmp_path):
    root = project(tmp_path / "p", '[tool.pmap-migrate]\nstyle = "global"\n')
    (root / "train.py").write_text(FAITHFUL_SITE)
    scan = cli("scan", root / "train.py", "--style", "faithful", "--format", "json", cwd=root)
    assert scan.returncode == 1, scan.stderr
    codes = [f["code"] for f in json.loads(scan.stdout)["findings"]]
    assert "PM100" in codes and not any(code.startswith("PM6") for code in codes)


def test_style_ignored_codes_and_targets_reach_notebooks(tmp_path):
    """The configuration's style (global), its per-path ignore (PM100: leave the sites alone)
    and per-path target reach a notebook as they reach a .py file next to it."""
    root = project(tmp_path / "p", '''
        [tool.pmap-migrate]
        style = "global"
        [tool.pmap-migrate.per-path."legacy/**"]
        ignore = ["PM100"]
        [tool.pmap-migrate.per-path."old/**"]
        target-jax = "0.4.38"
    ''')
    for folder in ("new", "legacy", "old"):
        (root / folder).mkdir()
    shutil.copy(NOTEBOOKS / "global_training.ipynb", root / "new" / "train.ipynb")
    (root / "legacy" / "nb.ipynb").write_text(notebook_of(FAITHFUL_SITE))
    (root / "legacy" / "mod.py").write_text(FAITHFUL_SITE)
    (root / "old" / "nb.ipynb").write_text(notebook_of(FAITHFUL_SITE))
    done = cli("diff", ".", "--no-progress", cwd=root)
    assert done.returncode == 1, done.stderr
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "new/train.ipynb:cell 3:1:2: PM600" in err and "_pmap_style_shard_map" not in out.split(
        "+++ b/old/nb.ipynb")[0]
    assert "+++ b/legacy/" not in out and "legacy/" not in err  # left alone, nothing reported
    assert "jax.experimental.shard_map" in out.split("+++ b/old/nb.ipynb")[1]


def test_check_takes_the_layouts_from_its_own_migration(tmp_path):
    """`check --style global` compares through the layout map of the migration it made (the
    stacked `b` the original returns is replicated): without the map the shapes differ."""
    root = tmp_path / "orig"
    root.mkdir()
    shutil.copy(ROOT / "tests" / "fixtures_global" / "producer_stack" / "before.py", root / "prog.py")
    report = tmp_path / "r.json"
    done = cli("check", root, "--style", "global", "--entry", "prog:run", "--devices", "8",
               "--report-json", report, cwd=tmp_path)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    (result,) = json.loads(report.read_text())["results"]
    assert result["verdict"] == "equivalent"
    assert "['b']: replicated, row 0 of axis 0 compared" in done.stdout.decode()

    # ORIGINAL MIGRATED: the map comes from migrating ORIGINAL with the same options.
    migrated = tmp_path / "migrated"
    applied = cli("apply", root, "--style", "global", "--out-dir", migrated, "--no-progress",
                  cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    done = cli("check", root, migrated, "--style", "global", "--entry", "prog:run", "--devices", "8",
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert "['b']: replicated, row 0 of axis 0 compared" in done.stdout.decode()


@pytest.mark.parametrize("package", ["equivalence", "transforms"])
def test_no_upward_imports(package):
    """equivalence and transforms never import migrator (check hands the layouts over)."""
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "migrator" or n.startswith("migrator.") for n in names), path
