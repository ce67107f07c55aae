"""Discovery honours the project's .gitignore files (as ruff and black do), unless turned off."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from migrator.config_file import load_config
from migrator.files import discover
from test_cli import SIMPLE, cli


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else textwrap.dedent(text).encode())
    return root


def found(root: Path, *paths: Path, **overrides) -> list[str]:
    config = load_config([root])
    if overrides:
        config = dataclasses.replace(config, **overrides)
    given = list(paths) or [root]
    return sorted(f.path.relative_to(root).as_posix() for f in discover(given, config))


TREE = {
    ".gitignore": "generated/\n*_pb2.py\n/scratch.py\n",
    "pkg/a.py": "", "pkg/b_pb2.py": "", "scratch.py": "", "pkg/scratch.py": "",
    "generated/c.py": "", "pkg/generated/d.py": "",
    "vendor/.gitignore": "*.py\n!keep.py\n", "vendor/drop.py": "", "vendor/keep.py": "",
    ".git/info/exclude": "local_only.py\n", "local_only.py": "",
}


def test_gitignored_files_and_directories_are_not_discovered(tmp_path):
    make_tree(tmp_path, TREE)
    assert found(tmp_path) == ["pkg/a.py", "pkg/scratch.py", "vendor/keep.py"]


def test_turned_off_every_file_is_discovered(tmp_path):
    make_tree(tmp_path, TREE)
    assert found(tmp_path, respect_gitignore=False) == [
        "generated/c.py", "local_only.py", "pkg/a.py", "pkg/b_pb2.py", "pkg/generated/d.py",
        "pkg/scratch.py", "scratch.py", "vendor/drop.py", "vendor/keep.py",
    ]


def test_config_key_turns_it_off(tmp_path):
    make_tree(tmp_path, {**TREE, "pyproject.toml": "[tool.pmap-migrate]\nrespect-gitignore = false\n"})
    assert "generated/c.py" in found(tmp_path)


def test_a_bad_config_value_is_an_error(tmp_path):
    from migrator.config_file import ConfigError

    make_tree(tmp_path, {"pyproject.toml": '[tool.pmap-migrate]\nrespect-gitignore = "no"\n'})
    with pytest.raises(ConfigError, match="respect-gitignore: must be true or false"):
        load_config([tmp_path])


def test_a_parent_gitignore_applies_when_walking_a_subdirectory(tmp_path):
    make_tree(tmp_path, TREE)
    assert found(tmp_path, tmp_path / "pkg") == ["pkg/a.py", "pkg/scratch.py"]


def test_files_named_on_the_command_line_are_always_taken(tmp_path):
    make_tree(tmp_path, TREE)
    assert found(tmp_path, tmp_path / "pkg" / "b_pb2.py") == ["pkg/b_pb2.py"]


def test_outside_a_repository_the_trees_own_gitignore_applies(tmp_path):
    root = tmp_path / "project"
    make_tree(root, {".gitignore": "skip/\n", "skip/a.py": "", "b.py": ""})
    (root / ".git").rmdir()
    assert found(root) == ["b.py"]


@pytest.mark.parametrize("flag, expected", [(None, b""), ("--no-respect-gitignore", b"+++ b/gen/x.py")])
def test_cli_diff_skips_gitignored_code_unless_told(tmp_path, flag, expected):
    make_tree(tmp_path, {".gitignore": "gen/\n", "gen/x.py": SIMPLE})
    result = cli("diff", ".", *([flag] if flag else []), cwd=tmp_path)
    assert expected in result.stdout
    assert result.returncode == (1 if flag else 0), result.stderr


def test_out_dir_still_gets_gitignored_python_files_unchanged(tmp_path):
    make_tree(tmp_path / "src", {".gitignore": "gen_*.py\n", "gen_a.py": SIMPLE, "b.py": SIMPLE})
    result = cli("apply", tmp_path / "src", "--out-dir", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "gen_a.py").read_bytes() == SIMPLE  # copied, not migrated
    assert b"_pmap_style_shard_map" in (tmp_path / "out" / "b.py").read_bytes()
