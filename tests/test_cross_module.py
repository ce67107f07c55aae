"""Steps called from another module of the paths given (transforms/global_view/cross_module.py).

Rule: a module-level pmap step that other modules of the run import by name goes global only
when its callers in every module go global with the same layouts; otherwise it keeps pmap's
contract everywhere and no importer's call of it is edited. Before, any use in another module
kept the step on the contract (PM603 "whose calls the global style does not follow yet").
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import legacy_python_or_skip
from test_cli import cli
from transforms.tree_uses import TreeModule, contexts, tree_facts

PACKAGES = Path(__file__).resolve().parent / "packages"

# An importer that calls `train_step` with values it cannot follow (its own parameters).
_EXTRA = b"from crosspkg.steps import train_step\n\n\ndef again(params, x):\n" \
         b"    return train_step(params, x)\n"


def _package(tmp_path: Path, with_extra: bool = False, donating: bool = False) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(PACKAGES / "crosspkg", root / "crosspkg")
    if donating:  # the importer's producers then unstack to fresh buffers
        steps = root / "crosspkg" / "steps.py"
        steps.write_text(steps.read_text().replace(
            '@functools.partial(jax.pmap, axis_name="batch")',
            '@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))'))
    if with_extra:
        (root / "crosspkg" / "extra.py").write_bytes(_EXTRA)
        main = root / "crosspkg" / "main.py"
        text = main.read_text()
        text = text.replace("from crosspkg.steps import evaluate, train_step\n",
                            "from crosspkg import extra\nfrom crosspkg.steps import evaluate, "
                            "train_step\n")
        text = text.replace("    per_device = evaluate(params, x)\n",
                            "    per_device = evaluate(params, x)\n"
                            "    params, loss = extra.again(params, x)\n")
        main.write_text(text)
    return root


def test_steps_called_only_from_another_module_go_global_with_their_callers(tmp_path):
    root = _package(tmp_path)
    scan = cli("scan", "crosspkg", "--style", "global", cwd=root).stdout.decode()
    assert "crosspkg/steps.py:10:2: PM600" in scan and "crosspkg/steps.py:16:12: PM600" in scan
    assert "those in crosspkg/main.py pass global arrays" in scan
    assert "PM603" not in scan and "PM612" not in scan, scan
    assert cli("apply", "crosspkg", "--style", "global", cwd=root).returncode == 0
    steps = (root / "crosspkg" / "steps.py").read_text()
    main = (root / "crosspkg" / "main.py").read_text()
    assert "jax.pmap" not in steps and "jax.shard_map(" in steps
    # The importer's own edits: the replicated params unstacked, the batch merged, no [0].
    assert "jax.device_put(jnp.linspace(0.5, 1.5, 3), NamedSharding(mesh, P()))" in main
    assert ".reshape(n * 4, 3) / 10" in main and '"loss": np.asarray(loss)' in main
    assert 'mesh = _mesh("batch")' in main and "def _mesh(axis_name):" in main
    again = cli("apply", "crosspkg", "--style", "global", cwd=root)  # a second apply: nothing
    assert b"0 changed" in again.stdout + again.stderr, again


def test_one_importer_that_cannot_follow_keeps_the_step_on_the_contract_everywhere(tmp_path):
    root = _package(tmp_path, with_extra=True)
    before = (root / "crosspkg" / "main.py").read_text()
    scan = cli("scan", "crosspkg", "--style", "global", cwd=root).stdout.decode()
    assert "crosspkg/steps.py:10:2: PM612 info kept pmap's calling convention: `train_step` is " \
           "called from another module whose calls cannot go global (crosspkg/extra.py:5: " \
           "argument 0 of `train_step` (`params`) has no known layout) (PM603)" in scan, scan
    assert "PM600" not in scan
    assert cli("apply", "crosspkg", "--style", "global", cwd=root).returncode == 0
    main = (root / "crosspkg" / "main.py").read_text()
    # No call of a step kept on the contract is edited: main's values stay stacked.
    assert "params, loss = train_step(params, x)" in main and "reshape(n, 4, 3)" in main
    assert '"loss": np.asarray(loss[0])' in main and "_mesh" not in main
    assert main.count("\n") > before.count("\n")  # only the faithful helper was added
    assert (root / "crosspkg" / "extra.py").read_bytes() == _EXTRA


# An importer that names no pmap, itself used by a third module: `train` would return the
# step's (then global) params to cli.py, which reads their row 0 as pmap gave it.
_TRAIN = """

def train():
    n = jax.local_device_count()
    params = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    x = np.arange(n * 4 * 3, dtype=np.float32).reshape(n, 4, 3) / 10
    params, _ = train_step(params, x)
    return params
"""
_CLI = """import numpy as np

from crosspkg import main


def run():
    return {"first": np.asarray(main.train()[0]), **main.run()}
"""


def _used_importer(tmp_path: Path) -> Path:
    root = _package(tmp_path)
    main = root / "crosspkg" / "main.py"
    main.write_text(main.read_text().replace("# pmap-migrate-test: original needs legacy jax\n",
                                             "") + _TRAIN)
    (root / "crosspkg" / "cli.py").write_text(_CLI)
    return root


def test_an_importer_other_modules_use_is_read_with_those_uses(tmp_path):
    """Before, the uses of an importer naming no pmap were not known: `train_step` went
    global and cli.py read a row of the unstacked params (check: different)."""
    root = _used_importer(tmp_path)
    scan = cli("scan", "crosspkg", "--style", "global", cwd=root).stdout.decode()
    assert "crosspkg/steps.py:10:2: PM612 info kept pmap's calling convention: `train_step` is " \
           "called from another module whose calls cannot go global (crosspkg/main.py:20: " \
           "`train` returns values in the global layout, and another module calls it " \
           "(crosspkg/cli.py:7)" in scan, scan
    assert "steps.py:10:2: PM600" not in scan


def test_a_donating_step_goes_global_with_its_callers_in_another_module(tmp_path):
    root = _package(tmp_path, donating=True)
    scan = cli("scan", "crosspkg", "--style", "global", cwd=root).stdout.decode()
    assert "crosspkg/steps.py:10:2: PM600" in scan and "PM612" not in scan, scan
    assert cli("apply", "crosspkg", "--style", "global", cwd=root).returncode == 0
    assert "@functools.partial(jax.jit, donate_argnums=(0,))" in \
        (root / "crosspkg" / "steps.py").read_text()


@pytest.mark.parametrize("with_extra, donating, used", [
    (False, False, False), (True, False, False), (False, True, False), (False, False, True)],
    ids=["global", "one-importer-refuses", "donating", "importer-used-elsewhere"])
def test_cross_module_packages_check_equivalent(tmp_path, with_extra, donating, used):
    legacy = legacy_python_or_skip()
    root = _used_importer(tmp_path) if used else _package(tmp_path, with_extra, donating)
    entry = "crosspkg.cli:run" if used else "crosspkg.main:run"
    result = cli("check", root, "--style", "global", "--entry", entry,
                 "--devices", "8", "--repeat", "1", "--reference-python", legacy)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert f"{entry} [8 devices]: equivalent".encode() in result.stdout


STEPS = b"import jax\nstep = jax.pmap(lambda x: x)\n"


def _group_names(importer: str) -> set[str]:
    modules = [TreeModule("pkg/steps.py", ("pkg.steps",), STEPS),
               TreeModule("pkg/main.py", ("pkg.main",), importer.encode())]
    found = contexts(tree_facts(modules), modules)
    group = found.get("pkg/steps.py") and found["pkg/steps.py"].group
    return set(group.names) if group else set()


@pytest.mark.parametrize("importer, names", [
    ("from pkg.steps import step\n", {"step"}),
    ("from pkg.steps import step as other\n", set()),  # an alias: its calls are not by name
    # Through the module object, bound only by a module-level import: as plain as by name.
    ("from pkg import steps\nsteps.step(1)\n", {"step"}),
    ("import pkg.steps as s\ns.step(1)\n", {"step"}),
    ("from pkg.steps import step\nimport pkg.steps\npkg.steps.step(1)\n", {"step"}),
    ("from pkg import steps\nsteps = None\nsteps.step(1)\n", set()),  # the name rebound
    ("from pkg import steps\nsteps.step = None\n", set()),  # the step replaced
    ("import pkg.steps\nimport pkg\npkg.steps.step(1)\n", set()),  # `pkg` bound twice
    ("from pkg import steps\nrun(steps)\n", set()),  # the module handed around
    ("def f():\n    from pkg.steps import step\n    return step\n", set()),  # not module level
    ("from pkg.steps import *\n", set()),
])
def test_only_steps_every_other_module_imports_by_name_are_decided_across(importer, names):
    assert _group_names(importer) == names


# Steps called through their module (`steps.train_step(...)`, tests/packages/modcallpkg).
_MODULE_FORMS = {
    "from-import": ("from modcallpkg import steps\n", "steps."),
    "alias": ("import modcallpkg.steps as st\n", "st."),
    "dotted": ("import modcallpkg.steps\n", "modcallpkg.steps."),
}


def _modcall_package(tmp_path: Path, form: str = "from-import", main_edit=None) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(PACKAGES / "modcallpkg", root / "modcallpkg")
    main = root / "modcallpkg" / "main.py"
    statement, prefix = _MODULE_FORMS[form]
    text = main.read_text().replace("from modcallpkg import steps\n", statement)
    text = text.replace(" steps.", f" {prefix}")
    main.write_text(main_edit(text) if main_edit else text)
    return root


@pytest.mark.parametrize("form", sorted(_MODULE_FORMS))
def test_steps_called_through_their_module_go_global_with_their_callers(tmp_path, form):
    """Before, any `steps.train_step` read kept the step on the contract (PM603 "is used by
    another module")."""
    root = _modcall_package(tmp_path, form)
    scan = cli("scan", "modcallpkg", "--style", "global", cwd=root).stdout.decode()
    assert "modcallpkg/steps.py:10:2: PM600" in scan and "modcallpkg/steps.py:16:12: PM600" \
        in scan and "those in modcallpkg/main.py pass global arrays" in scan, scan
    assert "PM603" not in scan and "PM612" not in scan, scan
    assert cli("apply", "modcallpkg", "--style", "global", cwd=root).returncode == 0
    main = (root / "modcallpkg" / "main.py").read_text()
    prefix = _MODULE_FORMS[form][1]
    # The calls keep their text; the caller's values lose pmap's device axis.
    assert f"params, loss = {prefix}train_step(params, x)" in main
    assert f"per_device = {prefix}evaluate(params, x)" in main
    assert "jax.device_put(jnp.linspace(0.5, 1.5, 3), NamedSharding(mesh, P()))" in main
    assert ".reshape(n * 4, 3) / 10" in main and '"loss": np.asarray(loss)' in main
    assert "jax.pmap" not in (root / "modcallpkg" / "steps.py").read_text()


@pytest.mark.parametrize("edit, why", [
    # The step read as a value: its calls are not followed.
    (lambda text: text.replace("    for _ in range(3):\n        params, loss = steps.train_step(",
                               "    step = steps.train_step\n    for _ in range(3):\n"
                               "        params, loss = step("),
     "crosspkg/main.py:14: `train_step` used as a value, not called"),
    # A def of the step's name in the caller's module: the bare name would mean it.
    (lambda text: text.replace("def run():\n", "def train_step(a, b):\n    return a, b\n\n\n"
                               "def run():\n"),
     "`train_step` is used by another module (modcallpkg/main.py:19)"),
])
def test_a_caller_through_the_module_that_cannot_follow_keeps_the_contract(tmp_path, edit, why):
    root = _modcall_package(tmp_path, main_edit=edit)
    before = (root / "modcallpkg" / "main.py").read_text()
    scan = cli("scan", "modcallpkg", "--style", "global", cwd=root).stdout.decode()
    assert "modcallpkg/steps.py:10:2: PM612" in scan and why.replace("crosspkg", "modcallpkg") \
        in scan, scan
    assert "PM600" not in scan, scan
    assert cli("apply", "modcallpkg", "--style", "global", cwd=root).returncode == 0
    main = (root / "modcallpkg" / "main.py").read_text()
    assert "reshape(n, 4, 3)" in main and '"loss": np.asarray(loss[0])' in main
    assert "_mesh" not in main and main.count("\n") > before.count("\n")  # the faithful helper


@pytest.mark.parametrize("form", sorted(_MODULE_FORMS))
def test_steps_called_through_their_module_check_equivalent(tmp_path, form):
    legacy = legacy_python_or_skip()
    root = _modcall_package(tmp_path, form)
    result = cli("check", root, "--style", "global", "--entry", "modcallpkg.main:run",
                 "--devices", "8", "--repeat", "1", "--reference-python", legacy)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"modcallpkg.main:run [8 devices]: equivalent" in result.stdout
