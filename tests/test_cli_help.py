"""`--help` of every command reads as written: no markup eaten, no internal type names, a
usage line as click writes it; `--version`; shell completion; typos blamed on the flag."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from migrator.cli import app

COMMANDS = ["diff", "apply", "scan", "check", "explain"]
runner = CliRunner()


def help_text(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], prog_name="pmap-migrate",
                           env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


def flat(text: str) -> str:
    """The help's words in order, the panels' borders and line wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_no_internal_types_and_a_plain_usage_line(command):
    text = help_text(command)
    assert "<bool>" not in text and "<str>" not in text and "list[Path]" not in text
    assert "{" not in text.splitlines()[1]  # the usage line: no {paths}
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert re.search(rf"pmap-migrate {command} \[OPTIONS\] [A-Z]", usage), usage


@pytest.mark.parametrize("command", ["diff", "apply", "scan"])
def test_help_shows_the_configuration_table_and_choices(command):
    text = help_text(command)
    # It read "Default:  style." while rich took the table's name for markup.
    assert "Default: the project's [tool.pmap-migrate] style, else faithful." in flat(text)
    assert "<faithful|global>" in text
    assert "Usage: pmap-migrate " + command + " [OPTIONS] PATH..." in text
    for flag in ("--select", "--ignore", "--exclude", "--extend-exclude", "--severity",
                 "--quiet", "--stdin-filename"):
        assert flag in text
    assert "Replaces the project's [tool.pmap-migrate] select" in flat(text)
    assert "Added to the project's [tool.pmap-migrate] ignore" in flat(text)


def test_top_level_help_lists_version_and_completion():
    text = help_text()
    for flag in ("--version", "--install-completion", "--show-completion"):
        assert flag in text
    assert "explain" in text
    assert "<bool>" not in text


def test_version():
    from importlib import metadata

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"pmap-migrate {metadata.version('pmap-migrate')}"


def test_a_typo_in_style_is_blamed_on_the_command_line(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    result = runner.invoke(app, ["diff", str(tmp_path / "a.py"), "--style", "globl"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "Invalid value for '--style'" in result.stderr
    assert "pyproject" not in result.stderr and "[tool.pmap-migrate]" not in result.stderr


@pytest.mark.parametrize("flag, value", [("--select", "PM3,PMX"), ("--ignore", "banana"),
                                         ("--severity", "loud")])
def test_bad_flag_values_are_blamed_on_the_flag(flag, value, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    result = runner.invoke(app, ["scan", str(tmp_path / "a.py"), flag, value], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}'" in result.stderr


def test_show_completion_prints_the_script():
    # The variable turns shell detection off when the options are built, so that the
    # shell can be named: hence a process of its own.
    code = "from migrator.cli import app; app(prog_name='pmap-migrate')"
    done = subprocess.run(
        [sys.executable, "-c", code, "--show-completion", "bash"], capture_output=True, text=True,
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT),
                           _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"),
    )
    assert done.returncode == 0, done.stderr
    assert "_PMAP_MIGRATE_COMPLETE=complete_bash" in done.stdout
    assert "complete -o default -F _pmap_migrate_completion pmap-migrate" in done.stdout


def complete(words: str) -> list[str]:
    """What the installed bash script asks the program for `words` (the last one incomplete)."""
    result = runner.invoke(app, [], prog_name="pmap-migrate", env={
        "_PMAP_MIGRATE_COMPLETE": "complete_bash", "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    })
    assert result.exit_code == 0
    return result.output.split()


def test_completion_of_commands_flags_and_choices():
    assert complete("pmap-migrate ex") == ["explain"]
    assert complete("pmap-migrate diff --sel") == ["--select"]
    assert complete("pmap-migrate diff --style ") == ["faithful", "global"]
    assert complete("pmap-migrate scan --severity w") == ["warning"]
