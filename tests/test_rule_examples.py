"""Every rule's example runs, as Fixit's VALID / INVALID cases do: a rule's `before` in
transforms/rules.toml is a complete program that reports the rule's code through the real
pipeline (in the global style for the global-view-* rules), and where the rule has a fix its
`after` is exactly what the migration writes (helpers imported from `_pmap_helpers`, as
`--helper-module` writes them). Codes that arise from files rather than source (a syntax error,
a dangling symlink, a read-only file) are driven through `apply` on temporary files; the few
that no input can trigger say why in `example = "none: ..."`. No rule goes unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from migrator.cli import app
from transforms.codes.rules import Rule, all_rules
from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

HELPER_MODULE = "_pmap_helpers"
RULES = list(all_rules().values())


def style_of(rule: Rule) -> str:
    return "global" if rule.name.startswith("global-view-") else "faithful"


def source_of(rule: Rule) -> bytes:
    return (rule.before + "\n").encode("utf-8")


def _file(rule: Rule, tmp: Path) -> Path:
    (tmp / "example.py").write_bytes(source_of(rule))
    return tmp


def _dangling_symlink(rule: Rule, tmp: Path) -> Path:
    (tmp / "train.py").symlink_to(tmp / "missing_target.py")
    return tmp


def _symlink_outside_tree(rule: Rule, tmp: Path) -> Path:
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "lib.py").write_bytes(b"import jax\n\nstep = jax.pmap(abs)\n")
    (tmp / "src").mkdir()
    (tmp / "src" / "link.py").symlink_to(tmp / "elsewhere" / "lib.py")
    return tmp / "src"


def _read_only_file(rule: Rule, tmp: Path) -> Path:
    path = tmp / "train.py"
    path.write_bytes(source_of(rule))
    path.chmod(0o444)
    return tmp


# How each `example` other than the pipeline's is set up: the tree `apply` is given.
ARRANGEMENTS = {
    "file": _file,
    "dangling-symlink": _dangling_symlink,
    "symlink-outside-tree": _symlink_outside_tree,
    "read-only-file": _read_only_file,
}
THROUGH_PIPELINE = [r for r in RULES if not r.example]
THROUGH_APPLY = [r for r in RULES if r.example in ARRANGEMENTS]
UNTRIGGERABLE = [r for r in RULES if r.example.startswith("none")]


def test_every_rule_has_a_checked_example_or_a_reason():
    checked = {r.code for r in THROUGH_PIPELINE + THROUGH_APPLY + UNTRIGGERABLE}
    assert [r.code for r in RULES if r.code not in checked] == []


@pytest.mark.parametrize("rule", THROUGH_PIPELINE, ids=[r.code for r in THROUGH_PIPELINE])
def test_the_example_reports_its_rule(rule):
    result = migrate_source(source_of(rule), style=style_of(rule), helper_module=HELPER_MODULE)
    # A blocker (PM601-PM610) reports as its own finding or named in the PM612 of the site it
    # keeps on pmap's calling convention (one finding per site).
    reported = {f.code for f in with_named_blockers(result.findings)}
    assert rule.code in reported, [str(f) for f in result.findings]
    if rule.fix != "none":
        assert rule.after, f"{rule.code} has a fix ({rule.fix}), so its example shows `after`"
    if rule.after:
        assert result.source.decode("utf-8") == rule.after + "\n"


@pytest.mark.parametrize("rule", THROUGH_APPLY, ids=[r.code for r in THROUGH_APPLY])
def test_the_example_reports_its_rule_through_apply(rule, tmp_path):
    tree = ARRANGEMENTS[rule.example](rule, tmp_path)
    before = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file() and not p.is_symlink()}
    result = CliRunner().invoke(app, ["apply", str(tree)])
    assert f": {rule.code} {rule.severity} " in result.stderr, result.stderr
    if rule.fix == "none":
        assert {p: p.read_bytes() for p in before} == before  # reported, nothing written


@pytest.mark.parametrize("rule", UNTRIGGERABLE, ids=[r.code for r in UNTRIGGERABLE])
def test_an_untriggerable_rule_says_why(rule):
    reason = rule.example.removeprefix("none:").strip()
    assert rule.example.startswith("none: ") and len(reason.split()) >= 4, rule.example
    assert not rule.before and not rule.after


def test_the_examples_are_complete_programs_that_parse():
    import ast

    for rule in THROUGH_PIPELINE:
        tree = ast.parse(source_of(rule))
        assert any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body) or (
            "pmap-migrate: ignore" in rule.before), rule.code
