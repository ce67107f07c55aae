"""Rules that edit expressions keep the layout valid whatever it is (tests/layout_variants.py):
every one-change layout variant of these fixtures (a commented line break, a space dropped
before a bracket, redundant parentheses) migrates to the same program, parses, and is stable.
Slow: a few hundred migrations per fixture. `python tests/layout_variants.py` runs all."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from layout_variants import layout_problem, migrated_program, variants

# The fixtures whose rewrites edit expressions: folds of flag tests, replicate's arguments,
# row-0 reads, comments kept through a rewrite.
EDITING = [
    "hazard_shmap_merge_layout",
    "hazard_shmap_merge_forms",
    "placement_flax_replicate_layout",
    "unreplicate_tree_forms",
    "comments_and_formatting",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", EDITING)
def test_every_layout_variant_migrates_the_same(name):
    before = (FIXTURES / name / "before.py").read_bytes()
    expected = migrated_program(before)
    problems = [
        f"{v.kind}#{v.index}: {problem}"
        for v in variants(before.decode("utf-8"))
        if (problem := layout_problem(v, expected))
    ]
    assert problems == []


def test_variants_are_the_same_program_laid_out_otherwise():
    source = "def f(x):\n    if (not x or\n            x > 1):\n        return f(x)\n"
    found = list(variants(source))
    kinds = {v.kind for v in found}
    assert kinds == {"commented_break", "no_space", "parens"}
    assert any("if(" in v.source for v in found)
    assert any("# note" in v.source for v in found)
    assert all(v.source != source for v in found)
