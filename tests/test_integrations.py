"""Integrations: pre-commit hooks, the GitHub Actions workflow, the libcst codemod command,
and `apply --interactive` (hunk-by-hunk approval, driven through a real pseudo-terminal).

Each integration is exercised the way its host would run it: the hooks' entry + args + file
names, the workflow's `run:` scripts with the shell GitHub uses, `python -m libcst.tool`, and
a child process whose stdin and stdout are a pty.
"""

from __future__ import annotations

import ast
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import require, skip_unless_ci

from transforms.pipeline import migrate_source
from transforms.helpers.runtime_helper import HELPER_NAME
from transforms.target import TargetJax

yaml = require("yaml", "pyyaml reads the hook and workflow files")

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LEGACY_VENV = REPO / ".venv-jax-legacy"

# Two pmap sites; the first needs `P` (an added import) and both need the helper.
TWO_SITES = b'''\
import jax
import jax.numpy as jnp


def scale(x, w):
    return x * w


def total(x):
    return jax.lax.psum(x, "i")


p_scale = jax.pmap(scale, in_axes=(0, None))
p_total = jax.pmap(total, axis_name="i")
'''
MIGRATED_SCALE = b'p_scale = _pmap_style_shard_map(scale, axis_name="_pmap_axis", in_specs=(P("_pmap_axis"), P()))'
MIGRATED_TOTAL = b'p_total = _pmap_style_shard_map(total, axis_name="i")'
ORIGINAL_SCALE = b"p_scale = jax.pmap(scale, in_axes=(0, None))"
ORIGINAL_TOTAL = b'p_total = jax.pmap(total, axis_name="i")'
P_IMPORT = b"from jax.sharding import PartitionSpec as P"


def tool_env(**extra: str) -> dict[str, str]:
    """This interpreter's bin first on PATH (pmap-migrate, python), the repository importable."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("PYTHONHASHSEED", None)
    env.update(extra)
    return env


def helper_count(data: bytes) -> int:
    return data.count(f"def {HELPER_NAME}(".encode())


def test_two_site_sample_migrates_as_the_tests_expect():
    migrated = migrate_source(TWO_SITES).source
    assert MIGRATED_SCALE in migrated and MIGRATED_TOTAL in migrated and P_IMPORT in migrated
    assert helper_count(migrated) == 1


# -- pre-commit ------------------------------------------------------------------------------


def load_hooks() -> dict[str, dict]:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert isinstance(hooks, list)
    return {hook["id"]: hook for hook in hooks}


def run_hook(hook: dict, files: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """As pre-commit runs a hook: entry (shell-split) + args + the file names, from the repo root."""
    command = [*shlex.split(hook["entry"]), *hook.get("args", []), *files]
    return subprocess.run(command, cwd=cwd, env=tool_env(), capture_output=True, timeout=300)


def notebook_with(source: str) -> bytes:
    cell = {"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {},
            "outputs": [], "source": source.splitlines(keepends=True)}
    notebook = {"cells": [cell], "metadata": {"language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(notebook, indent=1) + "\n").encode()


def test_pre_commit_hooks_are_declared_as_documented():
    hooks = load_hooks()
    assert set(hooks) == {"pmap-migrate-check", "pmap-migrate-fix"}
    assert shlex.split(hooks["pmap-migrate-check"]["entry"]) == ["pmap-migrate", "diff"]
    assert shlex.split(hooks["pmap-migrate-fix"]["entry"]) == ["pmap-migrate", "apply"]
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "jupyter"]
        assert hook["require_serial"] is False
        assert "--no-progress" in hook["args"]
        assert hook.get("pass_filenames", True) is True


def test_pre_commit_hooks_check_then_fix(tmp_path):
    hooks = load_hooks()
    check, fix = hooks["pmap-migrate-check"], hooks["pmap-migrate-fix"]
    (tmp_path / "pkg").mkdir()
    site = tmp_path / "pkg" / "site.py"
    site.write_bytes(TWO_SITES)
    notebook = tmp_path / "pkg" / "nb.ipynb"
    notebook.write_bytes(notebook_with("import jax\n\nf = jax.pmap(lambda x: x * 2)\n"))
    originals = {site: site.read_bytes(), notebook: notebook.read_bytes()}
    files = ["pkg/site.py", "pkg/nb.ipynb"]  # pre-commit passes paths relative to the root

    pending = run_hook(check, files, tmp_path)
    assert pending.returncode == 1, pending.stderr.decode()
    assert b"+++ b/pkg/site.py" in pending.stdout and b"+++ b/pkg/nb.ipynb" in pending.stdout
    assert {p: p.read_bytes() for p in originals} == originals  # check never writes

    fixed = run_hook(fix, files, tmp_path)
    assert fixed.returncode == 0, fixed.stderr.decode()
    assert site.read_bytes() == migrate_source(TWO_SITES).source
    assert notebook.read_bytes() != originals[notebook]
    assert b"_pmap_style_shard_map" in notebook.read_bytes()

    clean = run_hook(check, files, tmp_path)
    assert clean.returncode == 0, clean.stdout.decode() + clean.stderr.decode()
    assert clean.stdout == b""


# -- GitHub Actions --------------------------------------------------------------------------

WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"
# The copy the workflow runs in: the files its run steps read (the package itself is already
# installed, editable, so the pip steps are skipped), and one corpus program, so that the scan
# and the equivalence step stay short (the workflow's loop then yields a single --entry).
COPIED = ["pyproject.toml", "README.md", "equivalence"]
CHECKED_PROGRAM = "train_step_pmean_donate"


def workflow_steps() -> list[tuple[str, dict]]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers, "the workflow has no trigger"
    return [(job_name, step) for job_name, job in workflow["jobs"].items() for step in job["steps"]]


def test_workflow_declares_its_actions_and_installs():
    steps = workflow_steps()
    jobs = {job for job, _ in steps}
    assert jobs == {"scan", "equivalence"}
    for job in jobs:
        uses = [step.get("uses", "") for name, step in steps if name == job]
        assert "actions/checkout@v4" in uses
        setup = next(step for name, step in steps if name == job and step.get("uses") == "actions/setup-python@v5")
        assert str(setup["with"]["python-version"]) == "3.11"
        installs = [step["run"] for name, step in steps if name == job and "pip install" in step.get("run", "")]
        assert installs, f"job {job} installs nothing"
    runs = [step.get("run", "") for _, step in steps]
    assert any(shlex.split(run) == ["pip", "install", "."] for run in runs)
    assert any("python -m equivalence.legacy_env" in run for run in runs)
    assert any("pmap-migrate scan . --format github" in run for run in runs)
    check = next(run for run in runs if "pmap-migrate check corpus" in run)
    for word in ("--entry", ":run", "--reference-python .venv-jax-legacy/bin/python", "--junit check.xml"):
        assert word in check
    upload = next(step for _, step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "check.xml" and upload.get("if") == "always()"


def _legacy_venv_works() -> bool:
    from equivalence.legacy_env import works

    return works(LEGACY_VENV)


def test_workflow_run_steps_execute_in_a_copy_of_the_repository(tmp_path):
    """Every `run:` step but the pip installs, in order, with GitHub's bash invocation."""
    require("jax", "the equivalence step runs the migrated program under JAX")
    if not _legacy_venv_works():
        skip_unless_ci(f"the legacy-JAX venv in {LEGACY_VENV} (python -m equivalence.legacy_env)")
    repo = tmp_path / "repo"
    repo.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=ignore)
        else:
            shutil.copy2(source, repo / name)
    (repo / "corpus").mkdir()
    shutil.copy2(REPO / "corpus" / f"{CHECKED_PROGRAM}.py", repo / "corpus")
    # The existing legacy venv: the workflow's creation step must find it working and return.
    (repo / ".venv-jax-legacy").symlink_to(LEGACY_VENV, target_is_directory=True)

    outputs: dict[str, subprocess.CompletedProcess] = {}
    skipped = []
    for job, step in workflow_steps():
        script = step.get("run")
        if script is None:
            continue
        if "pip install" in script:
            skipped.append(script)  # the package is installed already (editable)
            continue
        path = tmp_path / f"step{len(outputs)}.sh"
        path.write_text(script)
        started = time.monotonic()
        # `shell: bash` on GitHub runs `bash --noprofile --norc -eo pipefail {0}`.
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
            cwd=repo, env=tool_env(GITHUB_ACTIONS="true", CI="true"),
            capture_output=True, text=True, timeout=600,
        )
        label = f"{job}: {step.get('name', script.splitlines()[0])}"
        assert done.returncode == 0, f"{label} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        outputs[label] = done
        if "legacy_env" in script:
            assert time.monotonic() - started < 60, "an existing working venv must not be rebuilt"
    assert len(skipped) == 2 and len(outputs) == 3

    scan = next(out for label, out in outputs.items() if label.startswith("scan:"))
    annotations = [line for line in scan.stdout.splitlines() if line.startswith("::")]
    assert any(f"file=corpus/{CHECKED_PROGRAM}.py" in line and "title=PM100" in line for line in annotations)
    assert all(line.split(" ", 1)[0] in ("::notice", "::warning", "::error") for line in annotations)

    report = ET.parse(repo / "check.xml").getroot()
    suite = report if report.tag == "testsuite" else report.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == [f"{CHECKED_PROGRAM}:run[8 devices]"]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert not cases[0].findall("failure") and not cases[0].findall("error")


# -- libcst codemod command ------------------------------------------------------------------


GLOBAL_SAMPLE = REPO / "tests" / "fixtures_global" / "producer_device_put_replicated" / "before.py"


@pytest.mark.parametrize("target, style", [(None, None), ("0.4.38", None), (None, "global")])
def test_libcst_tool_runs_the_codemod_like_migrate_source(tmp_path, target, style):
    env = tool_env()
    init = subprocess.run(
        [sys.executable, "-m", "libcst.tool", "initialize", "."],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert init.returncode == 0, init.stderr
    config_path = tmp_path / ".libcst.codemod.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["modules"] = ["transforms", "libcst.codemod.commands"]
    config_path.write_text(yaml.safe_dump(config))
    sample = tmp_path / "sample.py"
    source = GLOBAL_SAMPLE.read_bytes() if style else TWO_SITES
    sample.write_bytes(source)

    # The command comes first: libcst finds it with a first argparse pass that does not know
    # the other options (`-j 1` before it would make "1" the command).
    command = [sys.executable, "-m", "libcst.tool", "codemod", "codemod.PmapMigrateCommand",
               "--no-format", "--hide-progress", "--jobs=1", "sample.py"]
    if target:
        command[-1:-1] = ["--target-jax", target]
    if style:
        command[-1:-1] = ["--style", style]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = migrate_source(source, TargetJax.parse(target or "0.10"), style=style or "faithful").source
    assert sample.read_bytes() == expected
    assert "Transformed 1 files successfully" in done.stderr
    # findings come back as codemod warnings
    assert ("PM600 info" if style == "global" else "PM100 info") in done.stderr

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and sample.read_bytes() == expected  # idempotent


# Fixtures that exercise the parts of the pipeline the codemod recomposes: added and removed
# imports, suppressions, removed APIs, encodings and line endings. All of them: -m slow.
CODEMOD_FIXTURES = [
    "from_import_pmap", "from_import_pmap_as", "existing_P_name", "in_axes_tuple",
    "report_tree_map_rename", "suppressions", "crlf_line_endings", "latin1_coding_cookie",
    "functools_partial_decorator", "out_axes_none",
]


def _codemod_fixture_params():
    every = sorted(p.parent.name for p in (REPO / "tests" / "fixtures").glob("*/before.py"))
    return [
        pytest.param(name, marks=() if name in CODEMOD_FIXTURES else pytest.mark.slow)
        for name in every
    ]


@pytest.mark.parametrize("fixture", _codemod_fixture_params())
def test_codemod_command_in_process_matches_migrate_source(fixture):
    import libcst as cst
    from libcst.codemod import CodemodContext

    from transforms.codemod import PmapMigrateCommand

    before = REPO / "tests" / "fixtures" / fixture / "before.py"
    source = before.read_bytes()
    context = CodemodContext(filename="before.py")
    command = PmapMigrateCommand(context)
    got = command.transform_module(cst.parse_module(source)).bytes
    expected = migrate_source(source)
    assert got == expected.source
    assert command.findings == [f.at("before.py") for f in expected.findings]
    assert context.warnings == [f.at("before.py").to_text() for f in expected.findings]


@pytest.mark.parametrize("fixture", ["producer_device_put_replicated", "fallback_callers_unseen",
                                     "hoist_local_sites"])
def test_codemod_command_global_style_matches_migrate_source(fixture):
    import libcst as cst
    from libcst.codemod import CodemodContext

    from transforms.codemod import PmapMigrateCommand

    source = (REPO / "tests" / "fixtures_global" / fixture / "before.py").read_bytes()
    context = CodemodContext(filename="before.py")
    command = PmapMigrateCommand(context, style="global")
    got = command.transform_module(cst.parse_module(source)).bytes
    expected = migrate_source(source, style="global")
    # the style makes a difference to the text, or (a fallback) to the findings
    faithful = migrate_source(source)
    assert (expected.source, expected.findings) != (faithful.source, faithful.findings)
    assert got == expected.source
    assert command.findings == [f.at("before.py") for f in expected.findings]
    assert any(f.code.startswith("PM6") for f in command.findings)


# -- apply --interactive ---------------------------------------------------------------------

DRIVER = '''\
import sys
from pathlib import Path

from migrator.interactive import refuse_without_tty, select_changes
from migrator.options import MigrationOptions
from migrator.runner import process_all

message = refuse_without_tty()
if message:
    print(message, file=sys.stderr)
    sys.exit(2)
results = list(process_all([Path(sys.argv[1])], MigrationOptions()))
chosen = select_changes(results, ask=input, show=print)
Path(sys.argv[2]).write_bytes(chosen[0].migrated)
print("DRIVER DONE")
'''


def run_in_pty(args: list[str], answers: bytes, cwd: Path, timeout: float = 180) -> tuple[int, bytes]:
    """Run a child with stdin/stdout/stderr on a fresh pty; type `answers`; return (rc, output)."""
    master, slave = os.openpty()
    try:
        child = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=tool_env(), close_fds=True
        )
    finally:
        os.close(slave)
    os.write(master, answers)  # the terminal's line discipline hands input() one line at a time
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif child.poll() is not None:
                break
        else:
            child.kill()
            raise AssertionError(f"timed out; output so far:\n{output.decode(errors='replace')}")
        return child.wait(timeout=30), bytes(output)
    finally:
        os.close(master)


@pytest.fixture
def two_site_file(tmp_path):
    path = tmp_path / "two_sites.py"
    path.write_bytes(TWO_SITES)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    return path, driver


def test_interactive_yes_no_through_a_pty(two_site_file, tmp_path):
    path, driver = two_site_file
    out = tmp_path / "chosen.py"
    rc, output = run_in_pty([sys.executable, str(driver), str(path), str(out)], b"y\nn\n", tmp_path)
    text = output.decode(errors="replace")
    assert rc == 0, text
    assert "DRIVER DONE" in text
    assert text.count("Apply this hunk? [y]es/[n]o/[a]ll remaining/[d]one with this file/[q]uit") == 2
    assert "two_sites.py: hunk 1 of 2" in text and "two_sites.py: hunk 2 of 2" in text
    assert "-p_scale = jax.pmap(scale, in_axes=(0, None))" in text
    chosen = out.read_bytes()
    assert MIGRATED_SCALE in chosen and ORIGINAL_SCALE not in chosen
    assert ORIGINAL_TOTAL in chosen and MIGRATED_TOTAL not in chosen
    assert helper_count(chosen) == 1
    assert P_IMPORT in chosen  # the accepted site's import comes with it
    ast.parse(chosen)
    assert path.read_bytes() == TWO_SITES  # selecting never writes


def test_interactive_quit_through_a_pty_changes_nothing(two_site_file, tmp_path):
    path, driver = two_site_file
    out = tmp_path / "chosen.py"
    rc, output = run_in_pty([sys.executable, str(driver), str(path), str(out)], b"q\n", tmp_path)
    text = output.decode(errors="replace")
    assert rc == 0, text
    assert text.count("Apply this hunk?") == 1
    assert out.read_bytes() == TWO_SITES


def test_interactive_refuses_a_pipe(two_site_file, tmp_path):
    path, driver = two_site_file
    out = tmp_path / "chosen.py"
    # stdin a pipe, stdout and stderr a terminal.
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, str(driver), str(path), str(out)],
            input=b"y\ny\n", stdout=slave, stderr=subprocess.PIPE, cwd=tmp_path, env=tool_env(),
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 2
    assert b"needs a terminal" in done.stderr and b"stdin is not a TTY" in done.stderr
    assert not out.exists()
    # Both ends piped: both are named.
    done = subprocess.run(
        [sys.executable, str(driver), str(path), str(out)],
        input=b"", capture_output=True, cwd=tmp_path, env=tool_env(), timeout=120,
    )
    assert done.returncode == 2 and b"stdin and stdout are not a TTY" in done.stderr


def test_refuse_without_tty_in_process(monkeypatch):
    from migrator.interactive import refuse_without_tty

    class Stream:
        def __init__(self, tty: bool):
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    monkeypatch.setattr(sys, "stdin", Stream(True))
    monkeypatch.setattr(sys, "stdout", Stream(True))
    assert refuse_without_tty() is None
    monkeypatch.setattr(sys, "stdout", Stream(False))
    assert "stdout is not a TTY" in refuse_without_tty()
    monkeypatch.setattr(sys, "stdin", None)
    assert "stdin and stdout are not a TTY" in refuse_without_tty()


# The rules, in process: scripted answers instead of a terminal.


def results_for(tmp_path: Path, sources: dict[str, bytes]):
    from migrator.options import MigrationOptions
    from migrator.runner import process_all

    for name, data in sources.items():
        (tmp_path / name).write_bytes(data)
    return list(process_all([tmp_path], MigrationOptions()))


def scripted(*answers: str):
    asked: list[str] = []
    replies = iter(answers)

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(replies)

    return ask, asked


def test_rejecting_every_site_adds_no_helper(tmp_path):
    from migrator.interactive import select_changes

    results = results_for(tmp_path, {"a.py": TWO_SITES})
    ask, asked = scripted("n", "n")
    [chosen] = select_changes(results, ask, lambda text: None)
    assert len(asked) == 2  # the helper and import hunks are never asked
    assert chosen.migrated == TWO_SITES and not chosen.changed


def test_accepting_every_site_is_exactly_the_migration(tmp_path):
    from migrator.interactive import select_changes

    results = results_for(tmp_path, {"a.py": TWO_SITES})
    ask, _ = scripted("y", "yes")
    [chosen] = select_changes(results, ask, lambda text: None)
    assert chosen.migrated == migrate_source(TWO_SITES).source and chosen.changed


def test_all_done_and_help(tmp_path):
    from migrator.interactive import HELP, select_changes

    sources = {"a.py": TWO_SITES, "b.py": TWO_SITES, "c.py": TWO_SITES, "d.py": b"x = 1\n"}
    results = results_for(tmp_path, sources)
    shown: list[str] = []
    # a.py: an unknown answer (help, asked again), then "d": nothing of a.py.
    # b.py: "n" then "a": the second hunk of b.py and all of c.py.
    ask, asked = scripted("maybe", "d", "n", "a")
    chosen = {r.file.path.name: r for r in select_changes(results, ask, shown.append)}
    assert len(asked) == 4
    assert HELP in shown
    assert chosen["a.py"].migrated == TWO_SITES
    assert ORIGINAL_SCALE in chosen["b.py"].migrated and MIGRATED_TOTAL in chosen["b.py"].migrated
    assert helper_count(chosen["b.py"].migrated) == 1
    assert chosen["c.py"].migrated == migrate_source(TWO_SITES).source
    assert chosen["d.py"] is results[3] and not chosen["d.py"].changed


def test_end_of_input_quits_and_keeps_what_was_accepted(tmp_path):
    from migrator.interactive import select_changes

    results = results_for(tmp_path, {"a.py": TWO_SITES, "b.py": TWO_SITES})
    answers = iter(["y", "y"])

    def ask(prompt: str) -> str:
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    chosen = select_changes(results, ask, lambda text: None)
    assert chosen[0].migrated == migrate_source(TWO_SITES).source
    assert chosen[1].migrated == TWO_SITES


def test_adjacent_multiline_sites_are_separate_hunks_and_stay_whole(tmp_path):
    from migrator.interactive import select_changes

    source = b'''\
import jax


def f(x):
    return x


a = jax.pmap(
    f,
    axis_name="i",
)
b = jax.pmap(f, axis_name="j")
'''
    results = results_for(tmp_path, {"m.py": source})
    ask, asked = scripted("n", "y")
    [chosen] = select_changes(results, ask, lambda text: None)
    assert len(asked) == 2
    text = chosen.migrated.decode()
    assert "a = jax.pmap(\n    f,\n    axis_name=\"i\",\n)\n" in text
    assert 'b = _pmap_style_shard_map(f, axis_name="j")' in text
    assert helper_count(chosen.migrated) == 1
    ast.parse(chosen.migrated)


def test_a_removed_import_stays_while_a_site_still_uses_it(tmp_path):
    from migrator.interactive import select_changes

    source = TWO_SITES.replace(b"import jax\n", b"import jax\nfrom jax import pmap\n", 1).replace(
        b"p_total = jax.pmap(", b"p_total = pmap("
    )
    migrated = migrate_source(source).source
    assert b"from jax import pmap\n" not in migrated
    results = results_for(tmp_path, {"m.py": source})
    ask, _ = scripted("y", "n")
    [chosen] = select_changes(results, ask, lambda text: None)
    assert b"from jax import pmap\n" in chosen.migrated and b"p_total = pmap(" in chosen.migrated
    assert MIGRATED_SCALE in chosen.migrated and P_IMPORT in chosen.migrated
    ask, _ = scripted("y", "y")
    [chosen] = select_changes(results, ask, lambda text: None)
    assert chosen.migrated == migrated


def test_unparsable_selection_keeps_the_file(tmp_path, monkeypatch):
    import libcst as cst

    from migrator import interactive

    results = results_for(tmp_path, {"a.py": TWO_SITES})

    def refuse(*args, **kwargs):
        raise cst.ParserSyntaxError("forced", lines=["x"], raw_line=1, raw_column=0)

    answers = iter(["y", "n"])

    def ask(prompt: str) -> str:
        answer = next(answers)
        if answer == "n":  # the file is planned by now; from here on nothing parses
            monkeypatch.setattr(interactive.cst, "parse_module", refuse)
        return answer

    shown: list[str] = []
    [chosen] = interactive.select_changes(results, ask, shown.append)
    assert chosen.migrated == TWO_SITES and not chosen.changed
    assert any("do not make valid Python" in text and "left unchanged" in text for text in shown)
