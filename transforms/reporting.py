"""The base of every transform: a target JAX, findings, and suppressions applied in one place."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, QualifiedNameProvider

from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.imports import RuleContext
from transforms.module_helpers import helper_name
from transforms.rule_runner import ModuleFacts
from transforms.suppressions import Suppressions
from transforms.target import TargetJax


class ReportingTransformer(cst.CSTTransformer):
    """Base of every rule. Rules run together in one traversal (transforms/rule_runner.py) and
    must:
    - read metadata only through `_qualified`, `_position` and `_parent` (of original nodes:
      every rule sees the input's nodes, so findings carry the input's line numbers);
    - accept an `updated_node` that an earlier rule in RULES already changed;
    - add module-level code only through `transforms.module_helpers.request_helper`, and
      imports only through `transforms.imports.add_import` / `remove_import`.

    A plain CSTTransformer rather than libcst's ContextAwareTransformer: that base would import
    libcst.codemod and libcst.matchers, a quarter of a second of every run's start-up, for
    matcher decorators no rule uses. `context` is a RuleContext or libcst's CodemodContext.
    """

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)
    # Byte strings one of which a file must contain for this rule to have anything to do;
    # the pipeline never parses a file that contains none of any rule's words.
    PREFILTER_WORDS: tuple[bytes, ...] = ()

    def __init__(
        self, context: RuleContext, target: TargetJax, suppressions: Suppressions | None = None
    ):
        super().__init__()
        self.context = context
        self.target = target
        self.suppressions = suppressions or Suppressions([])
        self.findings: list[Finding] = []
        # Set by RuleRunner when the rule runs with others in one pass; without it (a rule run
        # alone with transform_module, as libcst codemods are) libcst's metadata is used.
        self.facts: ModuleFacts | None = None

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """This rule alone over `tree`, with libcst's own metadata, as a libcst codemod runs
        (on a copy; the queued imports and helpers stay in `context`)."""
        self._input_module = tree
        return MetadataWrapper(tree).visit(self)

    def _helper_name(self, helper: str) -> str:
        """The name module helper `helper` has in this module (module_helpers.helper_name:
        its own, or a free `helper_2` where the module uses that name itself)."""
        if self.facts is not None:
            return helper_name(self.context, helper, self.facts.module, self.facts.syntax_tree)
        return helper_name(self.context, helper, self._input_module)

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
            self.findings.append(Finding(Code.SUPPRESSED,
                                         line, col, f"{code} suppressed: {message}"))
        if reason:
            return False
        self.findings.append(Finding(code, line, col, message))
        return True
