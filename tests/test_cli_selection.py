"""--select, --ignore, --exclude and --extend-exclude on the command line, over the project's
[tool.pmap-migrate] as ruff's flags go over its configuration: --select and --exclude
replace, --ignore and --extend-exclude add."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from migrator.cli import app
from migrator.config import Patterns
from migrator.config_file import CommandLine, load_config

SIMPLE = b'''import functools
import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, None))
def step(x, w):
    return lax.psum(x * w, "i")
'''
REFUSED = b"import jax\n\nf = jax.pmap(lambda x: x, in_axes=-1)\n"  # PM201, a warning
runner = CliRunner()


def project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.pmap-migrate]\n" + table)
    (tmp_path / "a.py").write_bytes(SIMPLE)
    (tmp_path / "neg.py").write_bytes(REFUSED)
    return tmp_path


def codes(tmp_path: Path, *flags: str) -> list[str]:
    """The codes `scan` reports over the project, in order."""
    result = runner.invoke(app, ["scan", str(tmp_path), "--format", "json", "--no-progress", *flags])
    assert result.exit_code in (0, 1), result.output
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


def test_ignore_adds_to_the_projects_ignore(tmp_path):
    project(tmp_path, 'ignore = ["PM2"]\n')
    assert codes(tmp_path) == ["PM100"]
    assert codes(tmp_path, "--ignore", "PM100") == []
    diff = runner.invoke(app, ["diff", str(tmp_path), "--ignore", "PM100"])
    assert diff.exit_code == 0 and diff.stdout == "", "PM100 ignored: nothing migrated"


def test_select_replaces_the_projects_select_and_its_ignore_still_applies(tmp_path):
    project(tmp_path, 'select = ["PM1"]\n')
    assert codes(tmp_path) == ["PM100"]
    assert codes(tmp_path, "--select", "PM2") == ["PM201"]
    assert codes(tmp_path, "--select", "PM2,PM100") == ["PM100", "PM201"]
    assert codes(tmp_path, "--select", "PM2", "--select", "pm100") == ["PM100", "PM201"]
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\nignore = ["PM201"]\n')
    assert codes(tmp_path, "--select", "PM2") == [], "the longer ignore prefix still wins"


def test_per_path_entries_still_apply_over_the_flags(tmp_path):
    project(tmp_path, '[tool.pmap-migrate.per-path."neg.py"]\nignore = ["PM2"]\n')
    assert codes(tmp_path, "--select", "PM") == ["PM100"]


def test_exclude_replaces_and_extend_exclude_adds(tmp_path):
    project(tmp_path, 'extend-exclude = ["generated"]\n')
    for folder in ("generated", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "g.py").write_bytes(SIMPLE)

    def scanned(*flags: str) -> list[str]:
        result = runner.invoke(app, ["scan", str(tmp_path), "--no-progress", *flags])
        return sorted(line.split(":")[0].rsplit("/", 2)[-2] for line in result.stdout.splitlines()
                      if "/g.py" in line.split(":")[0])

    assert scanned() == ["other"]
    assert scanned("--exclude", "other") == ["generated"]
    assert scanned("--extend-exclude", "other") == []
    assert scanned("--exclude", "other", "--extend-exclude", "nothing,generated") == []


def test_a_bad_glob_is_blamed_on_the_flag(tmp_path):
    project(tmp_path, "")
    result = runner.invoke(app, ["scan", str(tmp_path), "--exclude", "/"])
    assert result.exit_code == 2 and "Invalid value for '--exclude'" in result.stderr


def test_command_line_layer_in_the_configuration(tmp_path):
    project(tmp_path, 'select = ["PM1"]\nignore = ["PM2"]\nextend-exclude = ["gen"]\n')
    config = load_config([tmp_path], command_line=CommandLine(
        select=("PM3",), ignore=("PM304",), extend_exclude=("more",)))
    assert config.select == ("PM3",)
    assert config.ignore == ("PM2", "PM304")
    assert config.exclude.texts[-2:] == ("gen", "more")
    replaced = load_config([tmp_path], command_line=CommandLine(exclude=("only",)))
    assert replaced.exclude.texts == Patterns.compile(["only"]).texts
