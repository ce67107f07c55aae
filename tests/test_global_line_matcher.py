"""`LineMatcher` finds difflib's own blocks: the findings of `--style global` are moved back to
the input's lines through them, so any other alignment would move a finding."""

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import transforms.global_view.line_matcher as line_matcher
from transforms.global_view.line_matcher import LineMatcher


def edited(lines, edits):
    out = list(lines)
    for at, removed, inserted in edits:
        at = min(at, len(out))
        out[at:at + removed] = inserted
    return out


lines = st.lists(st.sampled_from(["", "x", "y", "return x", "pass", "z = 1"]), max_size=50)
edits = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 4),
                           st.lists(st.sampled_from(["", "x", "new", "w = 2"]), max_size=4)),
                 max_size=6)


@pytest.mark.parametrize("rare", [1, 2, line_matcher.RARE])
@settings(max_examples=300, deadline=None)
@given(a=lines, changes=edits)
def test_same_blocks_as_difflib(rare, a, changes):
    b = edited(a, changes)
    old = line_matcher.RARE
    line_matcher.RARE = rare  # small: most lines popular, so both searches are exercised
    try:
        got = LineMatcher(a, b).get_opcodes()
    finally:
        line_matcher.RARE = old
    assert got == difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def test_many_repeated_lines_tie_broken_as_difflib():
    """Equal blocks of the same length: the first in `a`, then the first in `b`."""
    block = ["def f():", "", "return x", ""]
    a = block * 40 + ["only here"] + block * 40
    b = ["new"] + block * 39 + ["only here", "added"] + block * 41
    assert LineMatcher(a, b).get_opcodes() == \
        difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
