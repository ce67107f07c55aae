"""The base of every transform: a target JAX, findings, and suppressions applied in one place."""

from __future__ import annotations

import functools

import libcst as cst
from libcst import CSTTransformer
from libcst.codemod import Codemod, CodemodContext, ContextAwareTransformer
from libcst.matchers._decorators import CONSTRUCTED_LEAVE_MATCHER_ATTR, CONSTRUCTED_VISIT_MATCHER_ATTR
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider

from transforms.codes.findings import Finding
from transforms.rule_runner import ModuleFacts
from transforms.suppressions import Suppressions
from transforms.target import TargetJax


@functools.cache
def _has_matcher_decorators(rule_class: type) -> bool:
    """Whether a method of the class carries libcst's @m.visit / @m.leave mark (what
    MatcherDecoratableTransformer's scan of every attribute of an instance looks for)."""
    return any(
        hasattr(value, CONSTRUCTED_VISIT_MATCHER_ATTR) or hasattr(value, CONSTRUCTED_LEAVE_MATCHER_ATTR)
        for klass in rule_class.__mro__ for value in vars(klass).values()
    )


class ReportingTransformer(ContextAwareTransformer):
    """Base of every rule. Rules run together in one traversal (transforms/rule_runner.py) and
    must:
    - read metadata only through `_qualified`, `_position` and `_parent` (of original nodes:
      every rule sees the input's nodes, so findings carry the input's line numbers);
    - accept an `updated_node` that an earlier rule in RULES already changed;
    - add module-level code only through `transforms.module_helpers.request_helper`.
    """

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)
    # Byte strings one of which a file must contain for this rule to have anything to do;
    # the pipeline never parses a file that contains none of any rule's words.
    PREFILTER_WORDS: tuple[bytes, ...] = ()

    def __init__(
        self, context: CodemodContext, target: TargetJax, suppressions: Suppressions | None = None
    ):
        if not _has_matcher_decorators(type(self)):
            # libcst's matcher-decorator scan costs ~30 ms per instance (and the first file
            # of every worker process paid it for each rule); a rule class without
            # @m.visit/@m.leave methods needs only the empty tables.
            Codemod.__init__(self, context)
            CSTTransformer.__init__(self)
            self._MatcherDecoratableTransformer__matchers = None
            self._extra_visit_funcs, self._extra_leave_funcs = {}, {}
        else:
            super().__init__(context)
        self.target = target
        self.suppressions = suppressions or Suppressions([])
        self.findings: list[Finding] = []
        # Set by RuleRunner when the rule runs with others in one pass; without it (a rule run
        # alone with transform_module, as libcst codemods are) libcst's metadata is used.
        self.facts: ModuleFacts | None = None

    def _position(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based line and column of a node of the input module."""
        if self.facts is not None:
            start = self.facts.position(node).start
        else:
            start = self.get_metadata(PositionProvider, node).start
        return start.line, start.column + 1

    def _parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The parent of a node of the input module (None for the module itself)."""
        if self.facts is not None:
            return self.facts.parent(node)
        return self.get_metadata(ParentNodeProvider, node, None)

    def _qualified(self, node: cst.CSTNode) -> set[str]:
        if self.facts is not None:
            return self.facts.qualified(node)
        return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}

    def _report(self, node: cst.CSTNode, code: str, message: str) -> bool:
        """Record a finding. False when suppressed: by a comment (then reported as PM011) or
        by the project configuration (then silent); the caller must then change nothing."""
        if self.facts is not None and not self.suppressions.has_comments:
            # No comment can suppress it, so its line is not needed now: the runner places
            # every such finding in one (partial) pass at the end.
            if self.suppressions.covers(0, code):
                return False
            finding = Finding(code, 0, 0, message)
            self.findings.append(finding)
            self.facts.place_later(finding, node)
            return True
        line, col = self._position(node)
        reason = self.suppressions.covers(line, code)
        if reason == "comment":
            self.findings.append(Finding("PM011", line, col, f"{code} suppressed: {message}"))
        if reason:
            return False
        self.findings.append(Finding(code, line, col, message))
        return True
