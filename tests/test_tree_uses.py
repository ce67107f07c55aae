"""The paths given are one program: a module-level name another module of the run uses keeps
the contract its users call it by (transforms/tree_uses.py, migrator/tree_index.py).

Before, the global style rewrote `step` for its own module's caller while another module still
called it with pmap's stacked values (a broadcasting error), and rewrote a `shard` helper for
its module's pmap while another module's pmap still needed the reshape (a 16-device mesh on 8
devices). Both packages now migrate to programs that run and check equivalent. And what a
function of another module returns is known where it is simple: the device order an input
pipeline module gives lets a trainer's step go global.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import legacy_python_or_skip
from migrator.files import SourceFile
from migrator.tree_index import module_names, tree_contexts
from test_cli import cli
from transforms.tree_uses import (
    EVERY_NAME,
    TreeContext,
    TreeModule,
    tree_facts,
    used_elsewhere,
    uses_across_modules,
)

PACKAGES = Path(__file__).resolve().parent / "packages"
PMAP_MODULE = b"import jax\nstep = jax.pmap(lambda x: x)\ndef helper(x):\n    return x\n"


def module(display: str, source: str | bytes, *dotted: str, package=False) -> TreeModule:
    data = source.encode() if isinstance(source, str) else source
    return TreeModule(display, dotted, data, package=package)


@pytest.mark.parametrize("importer, expected", [
    ("from pkg.steps import step\nstep(1)\n", {"step": "main.py:1"}),
    ("from pkg.steps import step as s\n", {"step": "main.py:1"}),
    ("import pkg.steps as st\n\nst.helper(1)\n", {"helper": "main.py:3"}),
    ("from pkg import steps\nsteps.step(2)\n", {"step": "main.py:2"}),
    ("import pkg.steps\npkg.steps.step(3)\n", {"step": "main.py:2"}),
    ("from .steps import step\n", {"step": "main.py:1"}),
    ("from . import steps\nx = steps.step\n", {"step": "main.py:2"}),
    ("from pkg.steps import *\n", {EVERY_NAME: "main.py:1"}),
    ("from pkg import steps\nrun(steps)\n", {EVERY_NAME: "main.py:2"}),
    ("import steps\nsteps.step(1)\n", {"step": "main.py:2"}),  # a sibling script, by stem
    ("import pkg.other\nfrom pkg.stepsx import step\n", None),
    ("def f():\n    from pkg.steps import step\n    return step\n", {"step": "main.py:2"}),
])
def test_uses_of_a_modules_names_from_every_import_form(importer, expected):
    modules = [module("pkg/steps.py", PMAP_MODULE, "pkg.steps", "steps"),
               module("main.py", importer, "pkg.main")]
    assert uses_across_modules(modules).get("pkg/steps.py") == expected


def test_a_module_without_pmap_code_is_no_target_and_its_own_names_are_not_uses():
    modules = [module("pkg/util.py", "def f(x):\n    return x\n", "pkg.util"),
               module("pkg/steps.py", PMAP_MODULE + b"from pkg.steps import step\n", "pkg.steps"),
               module("main.py", "from pkg.util import f\n", "main")]
    assert uses_across_modules(modules) == {}


def test_a_package_init_resolves_relative_imports_inside_itself():
    init = module("pkg/__init__.py", "from .steps import step\n", "pkg", package=True)
    steps = module("pkg/steps.py", PMAP_MODULE, "pkg.steps")
    assert uses_across_modules([init, steps]) == {"pkg/steps.py": {"step": "pkg/__init__.py:1"}}


def test_star_uses_cover_public_names_only():
    uses = {EVERY_NAME: "main.py:1"}
    assert used_elsewhere(uses, "step") == "main.py:1"
    assert used_elsewhere(uses, "_private") is None
    assert used_elsewhere({"step": "a.py:3"}, "step") == "a.py:3"


def test_module_names_follow_packages_and_the_runs_root(tmp_path):
    (tmp_path / "proj" / "pkg" / "sub").mkdir(parents=True)
    for init in ("pkg/__init__.py", "pkg/sub/__init__.py"):
        (tmp_path / "proj" / init).write_text("")
    train = tmp_path / "proj" / "pkg" / "sub" / "train.py"
    script = tmp_path / "proj" / "scripts" / "main.py"
    assert module_names(train, tmp_path / "proj") == ("pkg.sub.train",)
    assert module_names(train, tmp_path) == ("pkg.sub.train", "proj.pkg.sub.train")
    assert module_names(script, tmp_path / "proj") == ("main", "scripts.main")
    assert module_names(tmp_path / "proj" / "pkg" / "__init__.py", tmp_path / "proj") == ("pkg",)


def test_a_notebook_importing_a_module_names_the_cell(tmp_path):
    import json

    (tmp_path / "steps.py").write_bytes(PMAP_MODULE)
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": text} for text in ("%matplotlib inline\nimport numpy as np",
                                           "import steps\n", "y = steps.step(np.ones(1))")]
    (tmp_path / "demo.ipynb").write_text(json.dumps({"cells": cells, "metadata": {},
                                                     "nbformat": 4, "nbformat_minor": 5}))
    files = [SourceFile(tmp_path / name, tmp_path, name) for name in ("steps.py", "demo.ipynb")]
    assert tree_contexts(files) == {
        tmp_path / "steps.py": TreeContext(used_elsewhere={"step": "demo.ipynb cell 3"})}


@pytest.mark.parametrize("importer, written", [
    ("from pkg import pipeline\npipeline.device_order()\n", "pkg.pipeline.device_order"),
    ("from . import pipeline\npipeline.device_order()\n", ".pipeline.device_order"),
    ("from pkg.pipeline import device_order as order\norder()\n", "pkg.pipeline.device_order"),
])
def test_a_function_of_another_module_returning_the_devices_is_known_by_its_imported_name(
        importer, written):
    pipeline = module("pkg/pipeline.py", "import jax\nimport jax as j\n\n"
                      "def device_order():\n    \"Devices in pmap's order.\"\n"
                      "    return j.local_devices()\n\n"
                      "def count(k=1):\n    return jax.device_count()\n\n"
                      "def data(): return jax.pmap(f)\n", "pkg.pipeline")
    main = module("pkg/main.py", importer + "step = jax.pmap(f)\n", "pkg.main")
    assert tree_facts([pipeline, main]).values == {"pkg/main.py": {written: "devices"}}


def copy_package(tmp_path: Path, name: str, folder: str) -> Path:
    root = tmp_path / folder
    shutil.copytree(PACKAGES / name, root / name)
    return root


def test_a_step_another_module_calls_keeps_pmaps_contract(tmp_path):
    root = copy_package(tmp_path, "sharedpkg", "proj")
    scan = cli("scan", "sharedpkg", "--style", "global", cwd=root)
    out = scan.stdout.decode()
    # Its callers there pass a batch, its caller here (`demo`) a replicated value.
    assert "sharedpkg/steps.py:9:2: PM612 info kept pmap's calling convention: `step` is " \
           "called from another module whose calls cannot go global (its callers in this " \
           "module pass other layouts than those in the other modules) (PM603)" in out, out
    assert "PM603 info" not in out and "PM600" not in out  # one finding: the blocker inside
    # Migrated alone the module has no other user: its own caller makes `step` global.
    alone = cli("scan", "sharedpkg/steps.py", "--style", "global", cwd=root)
    assert "steps.py:9:2: PM600" in alone.stdout.decode()


def test_a_step_no_module_of_the_run_calls_says_no_caller_in_the_paths_given(tmp_path):
    """The finding names what would help: the paths given hold no caller of the step (the
    module that calls it was not passed), rather than only this module."""
    root = copy_package(tmp_path, "sharedpkg", "proj")
    steps = root / "sharedpkg" / "steps.py"
    steps.write_text(steps.read_text().split("\n\ndef demo():")[0] + "\n")
    (root / "sharedpkg" / "main.py").write_text("import jax\n\n\ndef run():\n    return 1\n")
    out = cli("scan", "sharedpkg", "--style", "global", cwd=root).stdout.decode()
    assert "sharedpkg/steps.py:9:2: PM612 info kept pmap's calling convention: `step` has no " \
           "caller in the paths given" in out, out
    assert out.rstrip().endswith("(PM603)") and "PM600" not in out


def test_a_helper_another_module_uses_is_not_rewritten_for_this_modules_pmap(tmp_path):
    root = copy_package(tmp_path, "helperpkg", "proj")
    scan = cli("scan", "helperpkg", "--style", "global", cwd=root)
    assert b"used elsewhere too (helperpkg/main.py:9)" in scan.stdout
    assert cli("apply", "helperpkg", "--style", "global", cwd=root).returncode == 0
    data = (root / "helperpkg" / "data.py").read_text()
    assert "return x.reshape((n, -1) + x.shape[1:])" in data


def test_the_device_order_another_module_returns_lets_the_trainer_go_global(tmp_path):
    """big_vision's trainer replicates onto `input_pipeline._pmap_device_order()`: known as
    the devices across the module boundary, so the step and its callers go global."""
    root = copy_package(tmp_path, "orderpkg", "proj")
    scan = cli("scan", "orderpkg", "--style", "global", cwd=root).stdout.decode()
    assert "orderpkg/main.py:17:2: PM600" in scan and "PM612" not in scan, scan
    alone = cli("scan", "orderpkg/main.py", "--style", "global", cwd=root).stdout.decode()
    assert "PM612" in alone and "PM600" not in alone  # without the other module: unknown


@pytest.mark.parametrize("package", ["sharedpkg", "helperpkg", "orderpkg"])
def test_packages_with_names_used_across_modules_check_equivalent(tmp_path, package):
    legacy = legacy_python_or_skip()
    root = copy_package(tmp_path, package, "proj")
    result = cli("check", root, "--style", "global", "--entry", f"{package}.main:run",
                 "--devices", "8", "--repeat", "1", "--reference-python", legacy)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert f"{package}.main:run [8 devices]: equivalent".encode() in result.stdout
