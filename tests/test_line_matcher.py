"""`LineMatcher` finds difflib's own blocks: the findings of `--style global` are moved back to
the input's lines through them, so any other alignment would move a finding."""

import difflib
import runpy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import transforms.line_matcher as line_matcher
from transforms.line_matcher import LineMatcher


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


# Long enough for difflib's autojunk (200 lines of b): the repeated lines become popular, left
# out of its search and then taken in by its extension; the numbered ones stay searched.
repeated = st.sampled_from(["", "x", "return x", "pass"])
long_lines = st.lists(st.one_of(repeated, st.integers(0, 60).map("line {}".format)),
                      min_size=200, max_size=320)
long_edits = st.lists(st.tuples(st.integers(0, 320), st.integers(0, 6),
                                st.lists(st.one_of(repeated, st.just("new")), max_size=5)),
                      max_size=12)


@pytest.mark.parametrize("rare", [1, 3, line_matcher.RARE])
@settings(max_examples=60, deadline=None)
@given(a=long_lines, changes=long_edits)
def test_same_blocks_as_difflib_with_autojunk(rare, a, changes):
    b = edited(a, changes)
    old = line_matcher.RARE
    line_matcher.RARE = rare
    try:
        got = LineMatcher(a, b, autojunk=True).get_opcodes()
    finally:
        line_matcher.RARE = old
    assert got == difflib.SequenceMatcher(None, a, b).get_opcodes()


def test_unified_diff_is_difflibs_on_a_generated_module():
    """`pmap-migrate diff` writes difflib's unified diff exactly, on a file long enough that
    difflib junks its popular lines (a many-sites module, its blocks edited as a rewrite would)."""
    from migrator.diffing import unified_diff

    generator = Path(__file__).resolve().parents[1] / "benchmarks" / "many_sites.py"
    old = runpy.run_path(str(generator))["source"](30)
    new = old.replace("@functools.partial(jax.pmap, axis_name=\"batch\", donate_argnums=(0,))\n",
                      "@jax.jit\n").replace("    losses = []\n", "    losses = []\n    n = n\n")
    expected = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                            new.splitlines(keepends=True), "a/m.py", "b/m.py"))
    assert unified_diff(old, new, "m.py") == expected
    assert unified_diff(old, new, "m.py", context=1) == "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), "a/m.py", "b/m.py", n=1))
