"""Finding codes: every code the transforms can emit is documented, code names codes through
the Code enum (never a "PMnnn" literal), and the rules page is generated from the same data."""

from __future__ import annotations

import ast
import io
import re
import tokenize

from conftest import ROOT

from transforms.codes import Code
from transforms.codes import global_view as global_view_codes
from transforms.codes.rules import RETIRED, all_rules

PACKAGES = ("transforms", "migrator", "equivalence")


def _sources(folders=PACKAGES):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent != ROOT / "transforms" / "codes":
                yield path


def emitted_codes() -> set[str]:
    """The codes the code names: `Code.NAME`, and the constants of transforms.codes.global_view
    that a module imports."""
    codes = set()
    for path in _sources(("transforms", "migrator")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    node.value.id == "Code"):
                codes.add(Code[node.attr].value)
            elif isinstance(node, ast.ImportFrom) and node.module == global_view_codes.__name__:
                for alias in node.names:
                    value = getattr(global_view_codes, alias.name)
                    codes |= {value} if isinstance(value, str) else set(value)
    return codes


def test_no_code_is_spelled_as_a_literal():
    """A "PMnnn" string (or an f-string building one) outside transforms/codes/ is a code the
    enum does not check; tests may keep literals. Docstrings and messages may name codes."""
    spelled = re.compile(r"""^[rRbBuU]*(["'])PM\d{3}\1$""")
    found = []
    for path in _sources():
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        for token in tokens:
            # Python 3.12+ splits f-strings into parts: f"PM60{i}" starts with "PM60".
            built = token.type == getattr(tokenize, "FSTRING_MIDDLE", None) and re.match(
                r"PM\d{1,3}$", token.string)
            fstring = token.type == tokenize.STRING and re.match(
                r"""^[rRbBuU]*[fF][rRbBuU]*(["'])PM\d{1,3}\{""", token.string)
            if spelled.match(token.string) and token.type == tokenize.STRING or built or fstring:
                found.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}")
    assert found == []


def test_code_members_are_the_rules():
    assert [code.value for code in Code] == list(all_rules())
    for code in Code:
        assert code.name == all_rules()[code].name.upper().replace("-", "_")
        assert str(code) == f"{code}" == code.value  # findings serialise as "PMnnn"


def test_every_emitted_code_is_documented():
    assert emitted_codes() - set(all_rules()) == set()


def test_every_documented_code_is_emitted():
    assert set(all_rules()) - emitted_codes() - RETIRED == set()


def test_rules_doc_is_up_to_date():
    from migrator.rules_doc import render

    assert (ROOT / "docs" / "RULES.md").read_text(encoding="utf-8") == render()


def test_global_view_code_names_match_the_rules():
    named = {v: k for k, v in vars(global_view_codes).items() if k.isupper() and k != "FALLBACKS"}
    for code, constant in named.items():
        assert all_rules()[code].name.removeprefix("global-view-") in (
            constant.lower().replace("_", "-"), "site")


def test_rule_docs_are_short():
    """ruff's shape: what it does and why, 1-3 sentences each; detail belongs in README.md's
    "Rule details" or in docstrings."""

    def sentences(text: str) -> int:
        text = re.sub(r"`[^`]*`|\([^)]*\)", "X", text)  # code and asides end no sentence
        return len(re.split(r"(?<=[.!?])\s+", text.strip()))

    for rule in all_rules().values():
        for field in (rule.what, rule.why):
            assert field and sentences(field) <= 3 and len(field.split()) <= 60, (rule.code, field)
