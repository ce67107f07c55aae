"""`pmap-migrate explain CODE`: a rule's section of docs/RULES.md in the terminal."""

from __future__ import annotations

from typer.testing import CliRunner

from migrator.cli import app
from transforms.codes.rules import rule

runner = CliRunner()


def test_explain_prints_the_rules_doc():
    result = runner.invoke(app, ["explain", "PM612"])
    assert result.exit_code == 0
    r = rule("PM612")
    assert result.stdout.startswith(f"## PM612 {r.name}\n")
    assert f"Severity: **{r.severity}**. Fix: **{r.fix}**." in result.stdout
    assert r.what in result.stdout and r.why in result.stdout and r.check in result.stdout
    assert "**Example.**" in result.stdout and "**Fix safety.**" in result.stdout


def test_explain_takes_any_case_and_the_rule_name():
    by_code = runner.invoke(app, ["explain", "PM201"]).stdout
    assert runner.invoke(app, ["explain", "pm201"]).stdout == by_code
    assert runner.invoke(app, ["explain", rule("PM201").name]).stdout == by_code


def test_the_section_is_the_one_in_rules_md():
    from migrator.rules_doc import DOC

    shown = runner.invoke(app, ["explain", "PM100"]).stdout
    body = shown.split("\n", 3)[3]  # without the title and the severity line
    assert body.strip() in DOC.read_text(encoding="utf-8")


def test_an_unknown_code_is_a_clear_error():
    result = runner.invoke(app, ["explain", "PM999"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "unknown finding code 'PM999'" in result.stderr and "did you mean" in result.stderr
