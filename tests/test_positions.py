"""Finding positions come from a cut-down codegen (transforms/rule_runner.py `_positions_of`):
it must give every node the start libcst's PositionProvider gives it."""

from __future__ import annotations

import random

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from conftest import CORPUS, ROOT, fixture_cases
from transforms.rule_runner import _positions_of

SOURCES = [p for case in fixture_cases() for p in (case / "before.py", case / "after.py")]
SOURCES += sorted(CORPUS.glob("*.py")) + sorted((ROOT / "transforms").rglob("*.py"))


class _Every(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node):
        self.nodes.append(node)
        return True


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_starts_match_position_provider(path):
    module = cst.parse_module(path.read_bytes())
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    every = _Every()
    module.visit(every)
    # All nodes at once, then small random sets (the codegen stops at the last one wanted).
    assert {n: r.start for n, r in _positions_of(module, set(every.nodes)).items()} == {
        n: expected[n].start for n in every.nodes}
    rng = random.Random(str(path))
    for _ in range(5):
        wanted = set(rng.sample(every.nodes, min(3, len(every.nodes))))
        got = _positions_of(module, wanted)
        assert {n: got[n].start for n in wanted} == {n: expected[n].start for n in wanted}
