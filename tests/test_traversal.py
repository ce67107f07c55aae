"""The rules' traversal and the helpers printed as text change no output byte.

`transforms.traversal.transform` must call a transformer's hooks in libcst's order with equal
arguments and return the same tree as `node.visit`; `HelperText` must print what the helper
statements print. Both are checked on every fixture and corpus program, and on layouts the
fixtures do not have (CRLF, two-space and tab indentation).
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodContext

from conftest import CORPUS, fixture_cases
from transforms import pipeline
from transforms.suppressions import Suppressions
from transforms.target import DEFAULT_TARGET
from transforms.traversal import TOKEN_TYPES, transform_module, visit_plan

SOURCES = [c / "before.py" for c in fixture_cases()] + sorted(CORPUS.glob("*.py"))
IDS = [f"{p.parent.name}/{p.name}" for p in SOURCES]


class _Recorder(cst.CSTTransformer):
    """Logs every hook call and edits a little: renames `x`, drops `pass` lines, doubles
    `del` statements, clears the optional `as` of imports: removal, flattening, and a changed
    child deep in an unchanged parent."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []

    def on_visit(self, node):
        self.log.append(("visit", type(node).__name__, cst.Module([]).code_for_node(node)))
        return True

    def on_leave(self, original_node, updated_node):
        self.log.append(("leave", type(original_node).__name__,
                         cst.Module([]).code_for_node(updated_node)))
        if isinstance(updated_node, cst.Name) and updated_node.value == "x":
            return updated_node.with_changes(value="x_renamed")
        if isinstance(updated_node, cst.SimpleStatementLine):
            if all(isinstance(s, cst.Pass) for s in updated_node.body):
                return cst.RemovalSentinel.REMOVE
            if any(isinstance(s, cst.Del) for s in updated_node.body):
                return cst.FlattenSentinel([updated_node, updated_node])
        if isinstance(updated_node, cst.ImportAlias) and updated_node.asname is not None:
            return updated_node.with_changes(asname=None)
        return updated_node

    def on_visit_attribute(self, node, attribute):
        return None

    def on_leave_attribute(self, original_node, attribute):
        return None


EDGE = b"""import os as o, sys
from a import (b as c, d)
def f(x, *, y=x):
    pass
    del x
    if x:
        pass
    return [x for x in y if x] or f"{x!r:>{y}}"
class C(x, metaclass=M):
    pass
"""


@pytest.mark.parametrize("source", [p.read_bytes() for p in SOURCES] + [EDGE], ids=IDS + ["edge"])
def test_same_hooks_and_tree_as_libcst(source):
    module = cst.parse_module(source)
    by_libcst, ours = _Recorder(), _Recorder()
    expected = module.visit(by_libcst)
    got = transform_module(module, ours)
    assert ours.log == by_libcst.log
    assert got.code == expected.code
    assert got.deep_equals(expected)


def test_almost_every_node_type_has_a_plan():
    """A type without a plan is visited by libcst itself; few may be."""
    types = [t for t in vars(cst).values()
             if isinstance(t, type) and issubclass(t, cst.CSTNode) and not t.__abstractmethods__]
    without = sorted(t.__name__ for t in types if visit_plan(t) is None)
    assert len(without) <= 8, without


def test_method_source_is_what_inspect_finds():
    """visit_plan reads each method's lines itself (inspect.getsource tokenizes them: about
    four times the cost, paid at every run's start); the text must be the same."""
    import inspect
    import textwrap

    from transforms.traversal import _method_source

    types = [t for t in vars(cst).values()
             if isinstance(t, type) and issubclass(t, cst.CSTNode) and not t.__abstractmethods__]
    for node_type in types:
        method = node_type._visit_and_replace_children
        assert _method_source(method) == textwrap.dedent(inspect.getsource(method)), node_type


def _migrate(source: bytes, *, by_libcst_visit: bool, helpers_as_text: bool, monkeypatch):
    if by_libcst_visit:
        monkeypatch.setattr(pipeline, "transform_module", lambda module, runner: module.visit(runner))
    else:
        monkeypatch.setattr(pipeline, "transform_module", transform_module)
    module, findings = pipeline.run_rules(
        cst.parse_module(source), CodemodContext(), DEFAULT_TARGET,
        Suppressions.from_source(source), source, helpers_as_text=helpers_as_text,
    )
    return module.bytes, findings


def _layouts(source: bytes) -> list[bytes]:
    """The source, and (when it is LF code without tabs) CRLF, 2-space and tab variants (the
    indentation inside strings changes too; a variant that is no longer Python is skipped)."""
    variants = [source]
    if b"\r" not in source and b"\t" not in source:
        variants.append(source.replace(b"\n", b"\r\n"))
        for indent in (b"  ", b"\t"):
            lines = []
            for line in source.split(b"\n"):
                stripped = line.lstrip(b" ")
                lines.append(indent * ((len(line) - len(stripped)) // 4) + stripped)
            variants.append(b"\n".join(lines))
    return variants


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_fast_paths_give_the_same_bytes_and_findings(path, monkeypatch):
    for source in _layouts(path.read_bytes()):
        try:
            compile(source, str(path), "exec")
        except SyntaxError:
            continue  # a re-indented variant that is no longer Python
        expected = _migrate(source, by_libcst_visit=True, helpers_as_text=False,
                            monkeypatch=monkeypatch)
        got = _migrate(source, by_libcst_visit=False, helpers_as_text=True,
                       monkeypatch=monkeypatch)
        assert got == expected


def _helper_texts() -> list[tuple[str, str]]:
    from transforms.helpers.helper_templates import FEATURES, helper_text
    from transforms.module_helpers import HELPER_ORDER
    from transforms.target import TargetJax

    texts = {}
    for version in ("0.4.38", "0.6.1", "0.10"):
        target = TargetJax.parse(version)
        for name in HELPER_ORDER:
            texts[helper_text(name, target)] = name
        for features, variant in ((frozenset(), "minimal"), (FEATURES - {"multiprocess"}, "single")):
            texts[helper_text("_pmap_style_shard_map", target, features)] = variant
    return sorted((name, text) for text, name in texts.items())


@pytest.mark.parametrize("name,text", _helper_texts())
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("indent", ["    ", "  ", "\t"])
def test_printed_helper_is_libcsts_codegen(name, text, newline, indent):
    from transforms.module_helpers import helper_statements, printed_helper

    statements = helper_statements(text, newline)
    expected = cst.Module(body=statements, default_newline=newline, default_indent=indent).code
    assert printed_helper(text, newline, indent) == expected


def _annotated_node_types(node_type: type) -> set[type] | None:
    """The node types libcst's field annotations allow below `node_type` (an abstract base
    stands for its concrete subclasses); None where an annotation says "anything"."""
    import dataclasses
    import typing

    concrete = [t for t in vars(cst).values() if isinstance(t, type)
                and issubclass(t, cst.CSTNode) and not t.__abstractmethods__]
    hints = typing.get_type_hints(node_type)
    found: set[type] = set()
    for field in dataclasses.fields(node_type):
        pending = [hints[field.name]]
        while pending:
            hint = pending.pop()
            if typing.get_origin(hint) is typing.Literal:
                continue
            if typing.get_args(hint):
                pending.extend(typing.get_args(hint))
            elif not isinstance(hint, type):
                return None
            elif issubclass(hint, cst.CSTNode):
                found.update(t for t in concrete if issubclass(t, hint))
    return found


@pytest.mark.parametrize("node_type", sorted(TOKEN_TYPES, key=lambda t: t.__name__),
                         ids=lambda t: t.__name__)
def test_token_types_hold_only_token_types(node_type):
    """A subtree the traversal does not enter must not hold a node a rule could hook."""
    below = _annotated_node_types(node_type)
    assert below is not None and below <= TOKEN_TYPES, sorted(t.__name__ for t in below - TOKEN_TYPES)


def test_token_subtrees_are_not_entered_and_others_are():
    """RuleRunner skips the token subtrees only while no rule hooks a token type."""
    from transforms.rule_runner import ModuleFacts, RuleRunner

    class CountsNames(cst.CSTTransformer):
        def __init__(self):
            super().__init__()
            self.names = 0

        def visit_Name(self, node):
            self.names += 1

    class HooksCommas(CountsNames):
        commas = 0

        def visit_Comma(self, node):
            self.commas += 1

    source = b"f(a, (b), c)\nx = [1, 2.5, -3j]  # comment\n"
    module = cst.parse_module(source)
    for rule in (CountsNames(), HooksCommas()):
        runner = RuleRunner([rule], ModuleFacts(module, source))
        assert (runner.unvisited_types == TOKEN_TYPES) is (type(rule) is CountsNames)
        assert transform_module(module, runner) is module
        assert rule.names == 5
    assert rule.commas == 4
