"""Finding codes: every code the transforms can emit is documented, and the rules page is
generated from the same data."""

from __future__ import annotations

import re

from conftest import ROOT

from transforms.codes.rules import RETIRED, all_rules


def emitted_codes() -> set[str]:
    codes = set()
    for folder in ("transforms", "migrator"):
        for path in (ROOT / folder).rglob("*.py"):
            codes |= set(re.findall(r'"(PM\d{3})"', path.read_text()))
    return codes


def test_every_emitted_code_is_documented():
    assert emitted_codes() - set(all_rules()) == set()


def test_every_documented_code_is_emitted():
    assert set(all_rules()) - emitted_codes() - RETIRED == set()


def test_rules_doc_is_up_to_date():
    from migrator.rules_doc import render

    assert (ROOT / "docs" / "RULES.md").read_text(encoding="utf-8") == render()


def test_global_view_code_names_match_the_rules():
    from transforms.codes import global_view as codes

    named = {v: k for k, v in vars(codes).items() if k.isupper()}
    for code, constant in named.items():
        assert all_rules()[code].name.removeprefix("global-view-") in (
            constant.lower().replace("_", "-"), "site")
