"""Run every rule in ONE traversal of the module, with metadata computed once and lazily.

Running each rule as its own libcst codemod costs, per rule, a deep copy of the module, a
metadata resolution (scope analysis alone is about six plain visits) and a visit through the
matcher machinery: 0.4 s per rule on a 300-line file, against 0.05 s for a no-op codemod.
Here the rules share one visit: for each node type, only the rules that define
`visit_<Type>` / `leave_<Type>` are called, and `leave_` results are chained, so a rule sees
the `updated_node` that earlier rules returned (original nodes are always the input's).

Metadata (`ModuleFacts`) is what rules ask for through ReportingTransformer: parents are
recorded during the traversal, positions are computed on the first finding, and qualified
names come from the import table (transforms/reading/names.py) unless the module needs real scope
analysis.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    PositionProvider,
    QualifiedNameProvider,
)
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition
from libcst.metadata.base_provider import LazyValue
from libcst.metadata.position_provider import NEWLINE_RE

from transforms.reading.names import ImportTable, parse_or_none
from transforms.traversal import TOKEN_TYPES

_MISSING = object()
_NOTHING: frozenset[str] = frozenset()
_REMOVE = cst.RemovalSentinel.REMOVE


class ModuleFacts:
    """Parents, positions and qualified names of the nodes of one input module."""

    def __init__(self, module: cst.Module, source: bytes, syntax_tree: object = _MISSING):
        """`syntax_tree`: `ast.parse(source)` (None: it does not parse) when the caller has it."""
        self.module = module
        self.source = source
        # The standard ast, for cheap whole-module questions; parsed once per file.
        self.syntax_tree = parse_or_none(source) if syntax_tree is _MISSING else syntax_tree
        self.imports = ImportTable.from_tree(self.syntax_tree)
        # By id(node): libcst's __hash__ is a Python function, and the keys are the input
        # module's nodes, alive as long as it is.
        self.parents: dict[int, cst.CSTNode] = {}
        self._wrapper: MetadataWrapper | None = None
        self._resolved: dict[type, object] = {}
        self._all_parents = False
        self._unplaced: list[tuple[object, cst.CSTNode]] = []
        self._recorded_below: set[int] = set()
        self._qualified: dict[cst.CSTNode, frozenset[str]] = {}
        self._by_name: dict[str, frozenset[str]] = {}
        self._last_asked: cst.CSTNode | None = None
        self._last_answer: frozenset[str] = _NOTHING
        self.stack: list[cst.CSTNode] = []  # the traversal's current path (set by RuleRunner)

    def _metadata(self, provider: type) -> dict:
        if provider not in self._resolved:
            if self._wrapper is None:
                self._wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._resolved[provider] = self._wrapper.resolve(provider)
        return self._resolved[provider]

    def position(self, node: cst.CSTNode) -> CodeRange:
        return self._metadata(PositionProvider)[node]

    def place_later(self, finding, node: cst.CSTNode) -> None:
        """Give `finding` the position of `node` when `placed` is called."""
        self._unplaced.append((finding, node))

    def placed(self, findings: list) -> list:
        """`findings` with the positions asked for by `place_later`. The positions come from
        libcst's own codegen bookkeeping, stopped once the last node asked for is done."""
        if not self._unplaced:
            return findings
        if PositionProvider in self._resolved:
            ranges = self._resolved[PositionProvider]
        else:
            ranges = _positions_of(self.module, {node for _, node in self._unplaced})
        where = {id(finding): ranges[node].start for finding, node in self._unplaced}
        return [
            dataclasses.replace(f, line=where[id(f)].line, col=where[id(f)].column + 1)
            if id(f) in where else f
            for f in findings
        ]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        found = self.parents.get(id(node), _MISSING)
        if found is _MISSING and self.stack:
            # Rules look a little ahead of the walk (a call's function, an argument's value):
            # most such nodes are a child or grandchild of the node being visited.
            found = _parent_below(self.stack[-1], node)
            if found is not None:
                self.parents[id(node)] = found
                return found
            found = _MISSING
        if found is _MISSING and self.stack and id(self.stack[-1]) not in self._recorded_below:
            # Rules look a little ahead of the walk (a call's function, its arguments): record
            # the parents below the node being visited before walking the whole module.
            top = self.stack[-1]
            recorder = _ParentRecorder(self.parents)
            recorder.stack.append(top)
            for child in top.children:
                child.visit(recorder)
            self._recorded_below.add(id(top))
            found = self.parents.get(id(node), _MISSING)
        if found is _MISSING and not self._all_parents:
            # A node the traversal has not reached yet: record every parent once (a plain
            # visit, a third of what ParentNodeProvider costs).
            self.module.visit(_ParentRecorder(self.parents))
            self._all_parents = True
            found = self.parents.get(id(node), _MISSING)
        return None if found is _MISSING else found

    def qualified(self, node: cst.CSTNode) -> frozenset[str]:
        """Asked by several rules for the same node: computed once per node (a Name's, once
        per spelling, as ImportTable.qualified gives it). The rules ask one after the other
        about the node being visited, so the last answer is kept at hand."""
        if node is self._last_asked:
            return self._last_answer
        names = self._qualified_uncached(node)
        self._last_asked, self._last_answer = node, names
        return names

    def _qualified_uncached(self, node: cst.CSTNode) -> frozenset[str]:
        if type(node) is cst.Name and not self.imports.needs_scope_analysis:
            names = self._by_name.get(node.value)
            if names is None:
                names = self._by_name[node.value] = frozenset(self.imports.names_for(node.value))
            if not names:
                return names  # refers to nothing, whatever its parent
            # `pmap` in `jax.pmap` is no reference by itself. (Asking for the parent of a node
            # the traversal has not reached yet costs a walk of the module.)
            # (`type(...) is`: libcst's node classes are ABCs, and an isinstance that fails
            # goes through ABCMeta; nothing derives from Attribute.)
            parent = self.parent(node)
            return _NOTHING if type(parent) is cst.Attribute and parent.attr is node else names
        found = self._qualified.get(node)
        if found is None:
            found = self._qualified[node] = frozenset(self._qualify(node))
        return found

    def _qualify(self, node: cst.CSTNode) -> set[str]:
        if self.imports.needs_scope_analysis:
            names = self._metadata(QualifiedNameProvider).get(node, ())
            if isinstance(names, LazyValue):  # libcst computes some values on first read
                names = names()
            return {q.name for q in names}
        return self.imports.qualified(node, None)  # (a Name is answered by `qualified`)


@functools.cache
def _child_fields(node_type: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(node_type))


@functools.cache
def _is_node_type(value_type: type) -> bool:
    return issubclass(value_type, cst.CSTNode)


def _children_by_field(node: cst.CSTNode):
    """The node's children from its dataclass fields, without libcst's `children`, which
    rebuilds the node to find them."""
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if _is_node_type(type(value)):
            yield value
        elif type(value) in (tuple, list):
            for item in value:
                if _is_node_type(type(item)):
                    yield item


def _parent_below(top: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """`top` or the child of `top` whose child `node` is, else None."""
    for child in _children_by_field(top):
        if child is node:
            return top
    for child in _children_by_field(top):
        for grandchild in _children_by_field(child):
            if grandchild is node:
                return child
    return None


class _AllPlaced(Exception):
    pass


_NOT_WANTED = contextlib.nullcontext()


class _StartsOfWanted(CodegenState):
    """A codegen state that tracks line and column and records the start of the wanted nodes
    only, as PositionProvider computes it (the syntactic start where libcst records one, else
    the start including whitespace), then stops the codegen once all are placed.

    PositionProvider's own state builds two position objects and a range for every node of
    the module and splits every token with a regex; this one does neither for the others."""

    def __init__(self, module: cst.Module, wanted: set[cst.CSTNode]):
        super().__init__(default_indent=module.default_indent,
                         default_newline=module.default_newline)
        self.line, self.column = 1, 0
        self.wanted = set(wanted)
        # An indented block's syntactic start is its first statement's (libcst hoists it).
        self.wanted.update(node.body[0] for node in wanted
                           if isinstance(node, cst.IndentedBlock) and node.body)
        # Membership by id: every node passes these tests, and libcst's __hash__ is a Python
        # call (the wanted nodes belong to the module, so their ids stay theirs).
        self._wanted = {id(node) for node in self.wanted}
        self.remaining = set(self._wanted)
        self.starts: dict[cst.CSTNode, CodePosition] = {}
        self._inclusive: dict[int, CodePosition] = {}

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            segments = NEWLINE_RE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self._wanted:
            self._inclusive[id(node)] = CodePosition(self.line, self.column)

    def after_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.remaining:
            self.starts.setdefault(node, self._inclusive[id(node)])
            self.remaining.discard(id(node))
            if not self.remaining:
                raise _AllPlaced

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if id(node) not in self._wanted:
            return _NOT_WANTED
        return self._syntactic(node, start_node)

    @contextlib.contextmanager
    def _syntactic(self, node: cst.CSTNode, start_node: cst.CSTNode | None):
        start = CodePosition(self.line, self.column)
        yield
        self.starts[node] = self.starts[start_node] if start_node is not None else start


def _positions_of(module: cst.Module, wanted: set[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The PositionProvider start of each node of `wanted` (nodes of `module`), as a range
    that starts and ends there; the codegen stops after the last of them."""
    state = _StartsOfWanted(module, wanted)
    try:
        module._codegen(state)
    except _AllPlaced:
        pass
    if state.remaining:
        raise KeyError(f"{len(state.remaining)} nodes are not in the module")
    return {node: CodeRange(state.starts[node], state.starts[node]) for node in wanted}


class _ParentRecorder(cst.CSTVisitor):
    def __init__(self, parents: dict):
        super().__init__()
        self.parents = parents
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[id(node)] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


@functools.cache
def rule_hooks(rule_class: type) -> tuple[tuple[str, str, str], ...]:
    """(visit|leave, node type, method name) of every hook the rule class defines itself."""
    hooks = []
    for attribute in dir(rule_class):
        kind, _, node_type = attribute.partition("_")
        if kind not in ("visit", "leave"):
            continue
        if getattr(rule_class, attribute) is getattr(cst.CSTTransformer, attribute, None):
            continue  # libcst's default no-op
        if not hasattr(cst, node_type):
            if hasattr(cst, node_type.split("_")[0]):
                raise TypeError(f"{rule_class.__name__}.{attribute}: per-attribute hooks are "
                                "not run by RuleRunner")
            continue
        hooks.append((kind, node_type, attribute))
    return tuple(hooks)


class RuleRunner(cst.CSTTransformer):
    """A transformer that dispatches every node to the rules that handle its type."""

    def __init__(self, rules: Sequence[cst.CSTTransformer], facts: ModuleFacts):
        super().__init__()
        self.facts = facts
        # Keyed by the node class libcst names `visit_<Type>` after.
        self._visits: dict[type, list[tuple[int, object]]] = {}
        self._leaves: dict[type, list[tuple[int, object]]] = {}
        for index, rule in enumerate(rules):
            for kind, node_type, attribute in rule_hooks(type(rule)):
                table = self._visits if kind == "visit" else self._leaves
                table.setdefault(getattr(cst, node_type), []).append((index, getattr(rule, attribute)))
        # Subtrees of whitespace, punctuation and the like are not entered when no rule hooks
        # any of those types (transforms/traversal.py).
        hooked = self._visits.keys() | self._leaves.keys()
        self.unvisited_types = frozenset() if hooked & TOKEN_TYPES else TOKEN_TYPES
        # A rule whose visit_ returned False hears nothing below that node, as in libcst.
        self._muted_at: list[cst.CSTNode | None] = [None] * len(rules)
        self._muted = 0  # how many entries of _muted_at are set
        self._stack = facts.stack

    def on_visit(self, node: cst.CSTNode) -> bool:
        stack = self._stack
        if stack:
            self.facts.parents[id(node)] = stack[-1]
        stack.append(node)
        visits = self._visits.get(type(node))
        if visits:
            muted_at = self._muted_at
            for index, visit in visits:
                if muted_at[index] is None and visit(node) is False:
                    muted_at[index] = node
                    self._muted += 1
        return True

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        self._stack.pop()
        leaves = self._leaves.get(type(original_node))
        if leaves:
            for index, leave in leaves:
                muted = self._muted_at[index]
                if muted is not None and muted is not original_node:
                    continue
                updated_node = leave(original_node, updated_node)
                # (type checks: FlattenSentinel is an abc.Sequence, and isinstance on it is slow)
                if updated_node is _REMOVE or type(updated_node) is cst.FlattenSentinel:
                    break
        if self._muted:
            for index, muted in enumerate(self._muted_at):
                if muted is original_node:
                    self._muted_at[index] = None
                    self._muted -= 1
        return updated_node

    # Rules do not use per-attribute hooks; skipping libcst's lookup for them halves the cost
    # of a visit.
    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None
