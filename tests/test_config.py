"""Project configuration: [tool.pmap-migrate] in pyproject.toml, read from real files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from migrator.config import DEFAULT_EXCLUDE, Config
from migrator.config_file import ConfigError, load_config
from migrator.jax_requirement import JAX_RELEASES
from transforms.codes.rules import all_rules
from transforms.target import NEWEST, TargetJax

ERROR_CODES = [f"PM00{n}" for n in range(1, 7)]


def make_project(root: Path, pyproject: str | None = None, files: dict[str, str] | None = None) -> Path:
    """A project directory bounded by `.git`, so the search never leaves tmp_path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ".git").mkdir(exist_ok=True)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(textwrap.dedent(pyproject), encoding="utf-8")
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def load(root: Path, pyproject: str | None = None, files: dict[str, str] | None = None, **kwargs) -> Config:
    make_project(root, pyproject, files)
    return load_config([root], **kwargs)


# ---------------------------------------------------------------------------------------
# Finding the file


def test_nearest_pyproject_at_or_above_first_path(tmp_path):
    root = make_project(tmp_path / "repo", '[tool.pmap-migrate]\ntarget-jax = "0.6.1"\n')
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("")
    for start in (root, root / "src" / "pkg", root / "src" / "pkg" / "mod.py"):
        config = load_config([start])
        assert config.source == root / "pyproject.toml"
        assert config.root == root
        assert config.target_jax == "0.6.1"


def test_the_first_path_decides_and_the_nearest_file_wins(tmp_path):
    root = make_project(tmp_path / "repo", '[tool.pmap-migrate]\ntarget-jax = "0.6.1"\n')
    sub = root / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[tool.pmap-migrate]\ntarget-jax = "0.4.38"\n')
    assert load_config([sub, root]).target_jax == "0.4.38"
    assert load_config([root, sub]).target_jax == "0.6.1"


def test_search_stops_at_a_git_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\ntarget-jax = "0.4.38"\n')
    repo = make_project(tmp_path / "repo")  # has .git, no pyproject.toml
    (repo / "pkg").mkdir()
    config = load_config([repo / "pkg"])
    assert config.source is None
    assert config.target_jax == NEWEST


def test_git_file_also_stops_the_search(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pmap-migrate]\ntarget-jax = "0.4.38"\n')
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: elsewhere\n")
    assert load_config([worktree]).source is None


def test_no_pyproject_gives_defaults_rooted_at_cwd(tmp_path, monkeypatch):
    repo = make_project(tmp_path / "repo")
    monkeypatch.chdir(repo)
    config = load_config([repo])
    assert config.source is None
    assert config.root == repo
    assert config.target_jax == NEWEST
    assert config.is_included(Path("a.py"))


def test_pyproject_without_the_table_is_used_with_defaults(tmp_path):
    config = load(tmp_path, '[project]\nname = "x"\n')
    assert config.source == tmp_path / "pyproject.toml"
    assert config.root == tmp_path
    assert config.target_jax == NEWEST
    assert config.is_included(tmp_path / "a.py")
    assert config.is_included(tmp_path / "nb.ipynb")
    assert not config.is_included(tmp_path / "a.txt")


def test_no_paths_searches_from_cwd(tmp_path, monkeypatch):
    make_project(tmp_path, '[tool.pmap-migrate]\ntarget-jax = "0.5.3"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config([]).target_jax == "0.5.3"


# ---------------------------------------------------------------------------------------
# include / exclude / extend-exclude


def test_default_excludes_cover_vcs_virtualenvs_and_build_output(tmp_path):
    config = load(tmp_path, "[tool.pmap-migrate]\n")
    for name in (".git", ".venv", "venv", ".tox", ".nox", "build", "dist", "__pycache__",
                 "node_modules", "site-packages", "*.egg-info"):
        assert name in DEFAULT_EXCLUDE
    for path in (".git/x.py", ".venv/lib/python3.11/site-packages/jax/a.py", "venv/a.py",
                 ".tox/py/a.py", ".nox/a.py", "build/lib/a.py", "dist/a.py",
                 "pkg/__pycache__/a.py", "web/node_modules/a.py", "lib/site-packages/a.py",
                 "pmap_migrate.egg-info/a.py", "deep/er/build/a.py"):
        assert not config.is_included(tmp_path / path), path
    for directory in (".venv", "src/build", "x.egg-info", "a/b/node_modules"):
        assert config.excluded_dir(tmp_path / directory), directory
    assert config.is_included(tmp_path / "src" / "builder" / "a.py")
    assert not config.excluded_dir(tmp_path / "src")


def test_include_replaces_the_default(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        include = ["*.py", "scripts/*.pyw"]
    """)
    assert config.is_included(tmp_path / "a" / "b.py")
    assert not config.is_included(tmp_path / "nb.ipynb")
    assert config.is_included(tmp_path / "scripts" / "x.pyw")
    assert not config.is_included(tmp_path / "other" / "x.pyw")  # anchored: only scripts/
    assert not config.is_included(tmp_path / "scripts" / "sub" / "x.pyw")  # * stays in one dir


def test_exclude_replaces_the_defaults(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        exclude = ["generated"]
    """)
    assert not config.is_included(tmp_path / "generated" / "a.py")
    assert not config.is_included(tmp_path / "x" / "generated" / "a.py")  # no slash: any level
    assert config.is_included(tmp_path / "build" / "a.py")  # defaults replaced
    assert config.is_included(tmp_path / "generated_not" / "a.py")


def test_extend_exclude_adds_to_the_defaults(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        extend-exclude = ["corpus/legacy", "**/fixtures/*_before.py", "test_*.py"]
    """)
    assert not config.is_included(tmp_path / "build" / "a.py")  # defaults kept
    assert not config.is_included(tmp_path / "corpus" / "legacy" / "a.py")
    assert config.excluded_dir(tmp_path / "corpus" / "legacy")
    assert config.is_included(tmp_path / "src" / "corpus" / "legacy" / "a.py")  # anchored
    assert not config.is_included(tmp_path / "fixtures" / "x_before.py")  # ** spans zero dirs
    assert not config.is_included(tmp_path / "a" / "b" / "fixtures" / "x_before.py")
    assert config.is_included(tmp_path / "a" / "fixtures" / "deeper" / "x_before.py")
    assert not config.is_included(tmp_path / "pkg" / "test_one.py")
    assert config.is_included(tmp_path / "pkg" / "one_test.py")


def test_exclude_with_both_keys(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        exclude = ["a"]
        extend-exclude = ["b"]
    """)
    assert not config.is_included(tmp_path / "a" / "x.py")
    assert not config.is_included(tmp_path / "b" / "x.py")
    assert config.is_included(tmp_path / "dist" / "x.py")


def test_double_star_spans_directories_and_single_star_does_not(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        exclude = ["src/*/gen.py", "docs/**", "/top.py", "tools/"]
    """)
    assert not config.is_included(tmp_path / "src" / "a" / "gen.py")
    assert config.is_included(tmp_path / "src" / "a" / "b" / "gen.py")
    assert not config.is_included(tmp_path / "docs" / "a" / "b" / "c.py")
    assert config.excluded_dir(tmp_path / "docs")
    assert not config.is_included(tmp_path / "top.py")
    assert config.is_included(tmp_path / "pkg" / "top.py")  # leading / anchors
    assert not config.is_included(tmp_path / "x" / "tools" / "a.py")  # trailing / ignored


def test_character_classes(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        exclude = ["v[0-9].py", "w[!a].py"]
    """)
    assert not config.is_included(tmp_path / "v1.py")
    assert config.is_included(tmp_path / "vx.py")
    assert not config.is_included(tmp_path / "wb.py")
    assert config.is_included(tmp_path / "wa.py")


def test_paths_relative_to_cwd(tmp_path, monkeypatch):
    config = load(tmp_path, '[tool.pmap-migrate]\nextend-exclude = ["pkg/skip"]\n')
    (tmp_path / "pkg").mkdir()
    monkeypatch.chdir(tmp_path / "pkg")
    assert not config.is_included(Path("skip/a.py"))
    assert config.is_included(Path("keep/a.py"))
    assert config.excluded_dir(Path("skip"))


def test_paths_outside_the_root_match_by_name(tmp_path):
    config = load(tmp_path / "repo", '[tool.pmap-migrate]\nextend-exclude = ["only/here", "*_gen.py"]\n')
    outside = tmp_path / "elsewhere"
    assert config.is_included(outside / "only" / "here" / "a.py")
    assert not config.is_included(outside / "x_gen.py")
    assert config.excluded_dir(outside / "build")


# ---------------------------------------------------------------------------------------
# target-jax


@pytest.mark.parametrize("value", ["0.10", "0.4.38", "0.6.1"])
def test_explicit_target(tmp_path, value):
    config = load(tmp_path, f'[tool.pmap-migrate]\ntarget-jax = "{value}"\n')
    assert config.target_jax == value
    assert config.target_for(tmp_path / "a.py") == value


def test_target_as_a_toml_float_is_rejected_with_a_hint(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*target-jax.*quoted string.*0\.1\)"):
        load(tmp_path, "[tool.pmap-migrate]\ntarget-jax = 0.10\n")


@pytest.mark.parametrize("value", ['"latest"', '"0"', "10", "[\"0.10\"]"])
def test_bad_target_values(tmp_path, value):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, f"[tool.pmap-migrate]\ntarget-jax = {value}\n")
    assert str(tmp_path / "pyproject.toml") in str(error.value)
    assert "target-jax" in str(error.value)


AUTO = '[tool.pmap-migrate]\ntarget-jax = "auto"\n'


@pytest.mark.parametrize(
    "specifier, expected",
    [
        ("==0.4.38", "0.4.38"),
        ("==0.4.35", "0.4.35"),  # a pin is taken as is, known or not
        ("==0.6.1", "0.6.1"),
        (">=0.4.30,<0.6", "0.5.3"),  # highest known below the upper bound
        (">=0.4.30,<0.10", "0.9.2"),
        (">=0.5", "0.10.2"),  # newest known
        (">=0.4,<=0.7.0", "0.7.0"),
        ("~=0.4.30", "0.4.38"),
        ("==0.4.*", "0.4.38"),
        ("!=0.10.2", "0.10.0"),
        ("", NEWEST),  # unpinned
        (">=0.11", "0.11"),  # newer than every known release: its lower bound
        (">=0.4.31,<0.4.35", "0.4.31"),
        ("[cuda12]>=0.4.30,<0.5", "0.4.38"),
        (" (>=0.5, <0.6) ; python_version >= '3.10'", "0.5.3"),
    ],
)
def test_auto_from_project_dependencies(tmp_path, specifier, expected):
    pyproject = AUTO + f'[project]\nname = "x"\ndependencies = ["numpy", "jaxlib==0.4.1", "jax{specifier}"]\n'
    config = load(tmp_path, pyproject)
    assert config.target_jax == expected
    TargetJax.parse(config.target_jax)


def test_auto_table_is_the_documented_releases():
    assert JAX_RELEASES == (
        "0.4.25", "0.4.30", "0.4.38", "0.5.0", "0.5.3", "0.6.0", "0.6.1", "0.7.0", "0.7.2",
        "0.8.0", "0.9.0", "0.9.2", "0.10.0", "0.10.2",
    )


def test_auto_without_any_jax_requirement_is_newest(tmp_path):
    config = load(tmp_path, AUTO + '[project]\nname = "x"\ndependencies = ["jaxtyping>=0.2", "numpy"]\n')
    assert config.target_jax == NEWEST == "0.10"


def test_auto_from_optional_dependencies_requires_all_of_them(tmp_path):
    config = load(tmp_path, AUTO + """
        [project.optional-dependencies]
        jax = ["jax>=0.4.30", "numpy"]
        test = ["pytest", "jax<0.6"]
    """)
    assert config.target_jax == "0.5.3"


def test_auto_project_dependencies_come_before_optional_ones(tmp_path):
    config = load(tmp_path, AUTO + """
        [project]
        dependencies = ["jax==0.4.38"]
        [project.optional-dependencies]
        new = ["jax>=0.8"]
    """)
    assert config.target_jax == "0.4.38"


def test_auto_contradicting_requirements_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*optional-dependencies.*target-jax"):
        load(tmp_path, AUTO + """
            [project.optional-dependencies]
            legacy = ["jax==0.4.38"]
            new = ["jax>=0.8"]
        """)


def test_auto_requirement_with_no_known_release_and_no_lower_bound(tmp_path):
    with pytest.raises(ConfigError, match="no known JAX release"):
        load(tmp_path, AUTO + '[project]\ndependencies = ["jax<0.4.20"]\n')


def test_auto_invalid_jax_requirement_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*project\.dependencies"):
        load(tmp_path, AUTO + '[project]\ndependencies = ["jax>>0.4"]\n')


@pytest.mark.parametrize(
    "constraint, expected",
    [
        ('"^0.4.30"', "0.4.38"),
        ('"~0.6.0"', "0.6.1"),
        ('"0.5.3"', "0.5.3"),
        ('">=0.4.30, <0.7"', "0.6.1"),
        ('"*"', NEWEST),
        ('{ version = "^0.7", extras = ["cuda12"] }', "0.7.2"),
        ('"0.4.38 || >=0.8"', "0.10.2"),
    ],
)
def test_auto_from_poetry(tmp_path, constraint, expected):
    config = load(tmp_path, AUTO + f"""
        [tool.poetry.dependencies]
        python = "^3.11"
        jax = {constraint}
    """)
    assert config.target_jax == expected


def test_auto_bad_poetry_constraint(tmp_path):
    with pytest.raises(ConfigError, match=r"tool\.poetry\.dependencies\.jax"):
        load(tmp_path, AUTO + '[tool.poetry.dependencies]\njax = "latest please"\n')


def test_auto_from_requirements_txt(tmp_path):
    config = load(tmp_path, AUTO, {
        "requirements.txt": """
            # pinned for the cluster
            -r requirements-base.txt
            --index-url https://example.invalid/simple
            numpy>=1.26
            jax[cuda12]>=0.4.30,\\
                <0.5  # the legacy pmap
            jaxlib==0.4.38 --hash=sha256:abc
        """,
        "requirements-dev.txt": "jax==0.8.0\n",
    })
    assert config.target_jax == "0.4.38"


def test_auto_from_other_requirements_files_when_requirements_txt_has_no_jax(tmp_path):
    config = load(tmp_path, AUTO, {
        "requirements.txt": "numpy\n",
        "requirements-jax.txt": "jax>=0.5 --hash=sha256:abc\n",
        "requirements-gpu.txt": "jax<0.7\n",
    })
    assert config.target_jax == "0.6.1"


def test_auto_pyproject_comes_before_requirements_files(tmp_path):
    config = load(tmp_path, AUTO + '[project]\ndependencies = ["jax==0.6.0"]\n', {
        "requirements.txt": "jax==0.4.38\n",
    })
    assert config.target_jax == "0.6.0"


def test_auto_requirements_in_subdirectories_are_not_read(tmp_path):
    config = load(tmp_path, AUTO, {"sub/requirements.txt": "jax==0.4.38\n"})
    assert config.target_jax == NEWEST


def test_auto_bad_requirements_line_names_the_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"requirements\.txt:2"):
        load(tmp_path, AUTO, {"requirements.txt": "numpy\njax=>0.4\n"})


# ---------------------------------------------------------------------------------------
# override_target (the CLI flag)


PER_PATH_TARGETS = """
    [tool.pmap-migrate]
    target-jax = "0.6.1"
    [tool.pmap-migrate.per-path."legacy/**"]
    target-jax = "0.4.38"
"""


def test_override_replaces_every_target_in_the_file(tmp_path):
    config = load(tmp_path, PER_PATH_TARGETS, override_target="0.9.0")
    assert config.target_jax == "0.9.0"
    assert config.target_for(tmp_path / "legacy" / "a.py") == "0.9.0"
    assert config.target_for(tmp_path / "a.py") == "0.9.0"


def test_without_override_the_file_decides(tmp_path):
    config = load(tmp_path, PER_PATH_TARGETS)
    assert config.target_for(tmp_path / "legacy" / "a.py") == "0.4.38"
    assert config.target_for(tmp_path / "new" / "a.py") == "0.6.1"


def test_override_auto_reads_the_requirements(tmp_path):
    config = load(tmp_path, '[project]\ndependencies = ["jax>=0.5,<0.7"]\n', override_target="auto")
    assert config.target_jax == "0.6.1"


def test_override_skips_resolving_auto_in_the_file(tmp_path):
    # The file's auto would fail; the flag makes it irrelevant.
    config = load(tmp_path, AUTO + '[project]\ndependencies = ["jax<0.4.20"]\n', override_target="0.10")
    assert config.target_jax == "0.10"


def test_bad_override_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="--target-jax"):
        load(tmp_path, "[tool.pmap-migrate]\n", override_target="soon")


# ---------------------------------------------------------------------------------------
# select / ignore / per-path


def test_defaults_keep_everything(tmp_path):
    config = load(tmp_path, "[tool.pmap-migrate]\n")
    assert all(config.keeps(tmp_path / "a.py", code) for code in all_rules())


def test_select_by_prefix(tmp_path):
    config = load(tmp_path, '[tool.pmap-migrate]\nselect = ["PM3", "PM100"]\n')
    here = tmp_path / "a.py"
    assert config.keeps(here, "PM301") and config.keeps(here, "PM304") and config.keeps(here, "PM100")
    assert not config.keeps(here, "PM201")
    assert not config.keeps(here, "PM007")


def test_ignore_by_prefix_and_the_longest_prefix_wins(tmp_path):
    config = load(tmp_path, '[tool.pmap-migrate]\nignore = ["PM2", "PM304"]\nselect = ["PM", "PM205"]\n')
    here = tmp_path / "a.py"
    assert not config.keeps(here, "PM201")
    assert config.keeps(here, "PM205")  # PM205 is more specific than PM2
    assert not config.keeps(here, "PM304")
    assert config.keeps(here, "PM301")


def test_ignore_wins_a_tie(tmp_path):
    config = load(tmp_path, '[tool.pmap-migrate]\nselect = ["PM3"]\nignore = ["PM3"]\n')
    assert not config.keeps(tmp_path / "a.py", "PM301")


def test_codes_are_case_insensitive(tmp_path):
    config = load(tmp_path, '[tool.pmap-migrate]\nignore = ["pm304"]\n')
    assert not config.keeps(tmp_path / "a.py", "PM304")


@pytest.mark.parametrize("code", ERROR_CODES)
def test_error_codes_are_always_kept(tmp_path, code):
    assert all_rules()[code].severity == "error"
    config = load(tmp_path, f"""
        [tool.pmap-migrate]
        select = []
        ignore = ["PM", "{code}"]
        [tool.pmap-migrate.per-path."**"]
        ignore = ["PM0"]
    """)
    assert config.keeps(tmp_path / "a.py", code)
    assert not config.keeps(tmp_path / "a.py", "PM007")  # info, so it can be dropped


def test_per_path_adds_ignores_and_reenables(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        ignore = ["PM304"]
        [tool.pmap-migrate.per-path."tests/**"]
        ignore = ["PM2"]
        [tool.pmap-migrate.per-path."legacy"]
        select = ["PM304"]
    """)
    test_file = tmp_path / "tests" / "t.py"
    assert not config.keeps(test_file, "PM201")
    assert not config.keeps(test_file, "PM304")  # the global ignore still applies
    assert config.keeps(test_file, "PM301")
    assert config.keeps(tmp_path / "src" / "a.py", "PM201")
    assert not config.keeps(tmp_path / "src" / "a.py", "PM304")
    assert config.keeps(tmp_path / "legacy" / "deep" / "a.py", "PM304")  # re-enabled
    assert config.keeps(tmp_path / "x" / "legacy" / "a.py", "PM304")  # no slash: any level


def test_per_path_can_narrow_to_one_prefix(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate.per-path."scripts/*.py"]
        select = ["PM3"]
        ignore = ["PM"]
    """)
    script = tmp_path / "scripts" / "s.py"
    assert config.keeps(script, "PM302")
    assert not config.keeps(script, "PM100")
    assert config.keeps(tmp_path / "scripts" / "sub" / "s.py", "PM100")  # * is one level


def test_later_per_path_entries_win(tmp_path):
    config = load(tmp_path, """
        [tool.pmap-migrate]
        target-jax = "0.10"
        [tool.pmap-migrate.per-path."pkg/**"]
        ignore = ["PM304"]
        target-jax = "0.6.1"
        [tool.pmap-migrate.per-path."pkg/old/**"]
        select = ["PM304"]
        target-jax = "0.4.38"
        [tool.pmap-migrate.per-path."*_test.py"]
        ignore = ["PM3"]
    """)
    old = tmp_path / "pkg" / "old" / "a.py"
    assert config.target_for(old) == "0.4.38"
    assert config.keeps(old, "PM304")
    assert config.target_for(tmp_path / "pkg" / "a.py") == "0.6.1"
    assert not config.keeps(tmp_path / "pkg" / "a.py", "PM304")
    assert config.target_for(tmp_path / "a.py") == "0.10"
    old_test = tmp_path / "pkg" / "old" / "a_test.py"
    assert not config.keeps(old_test, "PM304")  # the last matching entry decides
    assert config.target_for(old_test) == "0.4.38"  # it sets no target: the earlier one holds


def test_per_path_auto_target(tmp_path):
    config = load(tmp_path, """
        [project]
        dependencies = ["jax>=0.4.30,<0.5"]
        [tool.pmap-migrate]
        target-jax = "0.10"
        [tool.pmap-migrate.per-path."legacy/**"]
        target-jax = "auto"
    """)
    assert config.target_for(tmp_path / "legacy" / "a.py") == "0.4.38"
    assert config.target_for(tmp_path / "a.py") == "0.10"


# ---------------------------------------------------------------------------------------
# Errors: the file and the key are always named


@pytest.mark.parametrize(
    "body, key",
    [
        ('target_jax = "0.10"', "target_jax"),
        ('excludes = ["x"]', "excludes"),
        ('include = "*.py"', "include"),
        ("exclude = [1]", "exclude[0]"),
        ('extend-exclude = [""]', "extend-exclude[0]"),
        ('select = ["E501"]', "select[0]"),
        ('ignore = ["PM999"]', "ignore[0]"),
        ('ignore = "PM3"', "ignore"),
        ('per-path = ["tests"]', "per-path"),
        ('per-path = { "tests/**" = ["PM2"] }', 'per-path."tests/**"'),
        ('per-path = { "tests/**" = { ignores = ["PM2"] } }', 'per-path."tests/**".ignores'),
        ('per-path = { "tests/**" = { select = ["PMX"] } }', 'per-path."tests/**".select[0]'),
        ('per-path = { "tests/**" = { target-jax = "new" } }', 'per-path."tests/**".target-jax'),
        ('per-path = { "/" = { select = ["PM3"] } }', 'per-path."/"'),
    ],
)
def test_bad_keys_and_values(tmp_path, body, key):
    with pytest.raises(ConfigError) as error:
        load(tmp_path, f"[tool.pmap-migrate]\n{body}\n")
    message = str(error.value)
    assert str(tmp_path / "pyproject.toml") in message
    assert key in message


def test_unknown_key_suggests_the_spelling(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'target-jax'"):
        load(tmp_path, '[tool.pmap-migrate]\ntarget_jax = "0.10"\n')


def test_table_that_is_not_a_table(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*tool\.pmap-migrate"):
        load(tmp_path, '[tool]\npmap-migrate = "yes"\n')


def test_underscore_table_name_is_reported(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*tool\.pmap_migrate"):
        load(tmp_path, '[tool.pmap_migrate]\ntarget-jax = "0.10"\n')


def test_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match=r"pyproject\.toml.*not valid TOML"):
        load(tmp_path, "[tool.pmap-migrate\n")


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_this_repository_loads(monkeypatch):
    root = Path(__file__).resolve().parent.parent
    config = load_config([root / "corpus"], override_target="auto")
    assert config.source == root / "pyproject.toml"
    assert config.target_jax in JAX_RELEASES  # from the `jax` extra
    assert config.is_included(root / "corpus" / "aliases.py")
    assert not config.is_included(root / "pmap_migrate.egg-info" / "x.py")
