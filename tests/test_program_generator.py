"""The global-style generator's shapes (tests/program_generator.py `global_programs`): every
shape and every way of building a step is drawn, every program parses, hypothesis's health
checks pass; and the batch worker runs programs of several files, one after the other, each
with its own modules (tests/batch_worker.py). Generation only, no migration: the sweep
(tests/test_generated_equivalence.py) migrates and checks."""

from __future__ import annotations

import ast
import collections
import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from program_generator import (
    CLASS_FORMS,
    FACTORY_FORMS,
    INLINE_FORMS,
    NEW_SHAPES,
    PACKAGE,
    global_programs,
)

from equivalence.runner import worker_environment

BATCH_WORKER = Path(__file__).with_name("batch_worker.py")


@functools.cache
def drawn(shapes: tuple[str, ...], examples: int = 80) -> list:
    """`examples` programs of `shapes`, the same on every run (derandomize), not shrunk."""
    programs = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
    @given(global_programs(shapes))
    def draw(program):
        programs.append(program)

    draw()
    return programs


def test_every_shape_is_drawn_about_half_of_them_new():
    programs = drawn(("module",) + NEW_SHAPES, 200)
    shapes = collections.Counter(program.shape for program in programs)
    assert set(shapes) == {"module", *NEW_SHAPES}, shapes
    assert 0.3 < shapes["module"] / len(programs) < 0.7, shapes


@pytest.mark.parametrize("shape", ("module",) + NEW_SHAPES)
def test_each_shape_has_its_files_and_entry(shape):
    for program in drawn((shape,), 20):
        assert f"shape={shape}" in program.features
        paths = [path for path, _ in program.files]
        module, _, function = program.entry.partition(":")
        if shape == "package":
            assert paths == [f"{PACKAGE}/__init__.py", f"{PACKAGE}/steps.py",
                             f"{PACKAGE}/main.py"]
            assert program.entry == f"{PACKAGE}.main:run"
        elif shape == "notebook":
            assert paths == ["notebook.ipynb"] and program.entry == "notebook.ipynb:result"
        elif shape == "script":
            assert paths == ["script.py"] and program.entry == "script.py:result"
        else:
            assert paths == [f"{module}.py"] and function == "run"


@pytest.mark.parametrize("shape, form", [("factory", f) for _, f in FACTORY_FORMS]
                         + [("class", f) for _, f in CLASS_FORMS]
                         + [("script", "on_the_spot"), ("notebook", "on_the_spot")])
def test_every_way_of_building_a_step_is_drawn(shape, form):
    """Each new shape's own forms (its first step is built that way)."""
    programs = [p for p in drawn((shape,)) if f"s0:form={form}" in p.features]
    assert programs, f"no {shape} program built its step as {form}"
    code = programs[0].source
    if form.startswith("factory"):
        assert "def make_train_step_0(" in code and "train_step_0 = make_train_step_0(" in code
    if form.startswith("class"):
        assert "self.p_train_step = " in code and "trainer_0 = Trainer0(" in code
    if form == "class_base":
        assert "class Trainer0(BaseTrainer0):" in code
    if form == "on_the_spot":
        assert ")(state_0" in code  # jax.pmap(...)(state_0, ...) at the call


def test_an_inline_lambda_is_drawn_at_top_level():
    assert ("lambda", "on_the_spot") in INLINE_FORMS
    assert any("jax.pmap(lambda params, x" in p.source for p in drawn(("script",))
               if "s0:callee=lambda" in p.features and "s0:form=on_the_spot" in p.features)


def test_script_forms_are_drawn():
    """Module statements, an `if __name__ == "__main__":` block, and a main() it calls."""
    for form in ("statements", "main_block", "main_function"):
        programs = [p for p in drawn(("script",)) if f"script={form}" in p.features]
        assert programs, form
        text = programs[0].files[0][1]
        assert ('if __name__ == "__main__":' in text) == (form != "statements")
        assert ("result = main()" in text) == (form == "main_function")


def test_package_imports_are_drawn_both_ways():
    """`from .steps import ...` and `from fuzzpkg.steps import ...`; `steps.name(...)` too."""
    mains = [dict(p.files)[f"{PACKAGE}/main.py"] for p in drawn(("package",))]
    assert any("from .steps import" in m for m in mains)
    assert any(f"from {PACKAGE}.steps import" in m for m in mains)
    assert any("steps.train_step_0(" in m for m in mains)


@settings(max_examples=60, database=None, deadline=None)
@given(global_programs())
def test_generated_programs_parse(program):
    """Every file compiles (a notebook: each code cell, as run top to bottom); a package's
    main imports from its steps module only names that module binds; the entry exists.
    Under hypothesis's default health checks."""
    files = dict(program.files)
    module, _, function = program.entry.partition(":")
    for path, text in files.items():
        if path.endswith(".ipynb"):
            cells = json.loads(text)["cells"]
            assert cells and all(cell["cell_type"] == "code" for cell in cells)
            tree = ast.parse("\n".join("".join(cell["source"]) for cell in cells))
            for cell in cells:
                compile("".join(cell["source"]), path, "exec")
        else:
            tree = ast.parse(text)
        if path == module or path == module.replace(".", "/") + ".py":
            if function == "result":
                assert any(isinstance(node, ast.Name) and node.id == "result"
                           for node in ast.walk(tree))
            else:
                assert function in {node.name for node in tree.body
                                    if isinstance(node, ast.FunctionDef)}
    if program.shape == "package":
        steps = ast.parse(files[f"{PACKAGE}/steps.py"])
        bound = {node.name for node in steps.body if isinstance(node, ast.FunctionDef)} | {
            target.id for node in steps.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.parse(files[f"{PACKAGE}/main.py"]).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("steps"):
                assert {alias.name for alias in node.names} <= bound
    # every pmap site counted: the sweep expects one finding per site
    assert program.sites >= 1 and program.source.count("jax.pmap") >= 1


def test_the_batch_worker_runs_each_programs_own_package(tmp_path):
    """Two programs whose packages have the same name: each runs its own (the worker
    forgets a program's modules and folder after it), from its own folder."""
    root, out = tmp_path / "root", tmp_path / "out"
    for name, value in (("prog_0000", 1.0), ("prog_0001", 2.0)):
        package = root / name / PACKAGE
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "steps.py").write_text(f"VALUE = {value}\n")
        (package / "main.py").write_text(
            "import numpy as np\n\nfrom .steps import VALUE\n\n\n"
            "def run():\n    return {'value': np.float32(VALUE)}\n")
    programs = [f"prog_{i:04d}={PACKAGE}.main:run" for i in range(2)]
    env = worker_environment(1, tmp_path / "hlo")
    subprocess.run([sys.executable, str(BATCH_WORKER), str(root), str(tmp_path / "hlo"),
                    str(out), *programs], env=env, cwd=str(root), check=True, timeout=120,
                   capture_output=True)
    for i, value in enumerate((1.0, 2.0)):
        result = json.loads((out / f"prog_{i:04d}" / "result.json").read_text())
        assert result["ok"], result
        assert float(np.load(out / f"prog_{i:04d}" / "outputs.npz")["leaf0"]) == value
