"""libcst's traversal, without rebuilding the nodes nothing below changed.

`node.visit(transformer)` calls the transformer's hooks in a fixed order, and on the way back
builds a new copy of every node of the module, changed or not (libcst: "TODO: provide
traversal where children are not replaced"). For the rules' one pass that copy was most of
its cost. `transform` calls the same hooks in the same order, with the same arguments, and
builds a new node only where a child's result is not the child itself; elsewhere the
`updated_node` a hook receives is the input node.

The order is libcst's own: read once per node type from the source of its
`_visit_and_replace_children`, which for almost every type is one
`return Type(field=visit_*(self, "field", self.field, visitor), ...)`. A type whose method has
any other shape (a handful: ImportFrom, f-string parts, type parameters) is visited by that
method itself, so it is exactly libcst's traversal there.

A transformer may also name node types whose subtrees it has no use for (`unvisited_types`:
RuleRunner gives `TOKEN_TYPES`, whitespace, punctuation and the like, when no rule hooks one):
they are not entered and come back as themselves, which is what a visit that calls no hook
below them returns.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import textwrap

import libcst as cst

_REMOVE = cst.RemovalSentinel.REMOVE
_DEFAULT = cst.MaybeSentinel.DEFAULT
_ONE = ("visit_required", "visit_optional", "visit_sentinel")
_MANY = ("visit_sequence", "visit_body_sequence")


@functools.cache
def visit_plan(node_type: type) -> tuple[tuple[str, str], ...] | None:
    """(field, libcst helper that visits it) for the fields libcst visits, in its order; None
    when the type's `_visit_and_replace_children` is not the plain one-constructor shape."""
    source = _method_source(node_type._visit_and_replace_children)
    try:
        body = ast.parse(source).body[0].body
    except (SyntaxError, IndexError, AttributeError):
        return None
    if (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Name)
            and body[0].value.id == "self"):
        return ()  # a leaf: whitespace, a comment, an operator
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    fields = {field.name for field in dataclasses.fields(node_type)}
    if call.args or {keyword.arg for keyword in call.keywords} != fields:
        return None
    plan = []
    for keyword in call.keywords:
        value = keyword.value
        if _is_own_field(value, keyword.arg):
            continue  # passed through unvisited (a string, a flag)
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in _ONE + _MANY and len(value.args) == 4 and not value.keywords):
            return None
        parent, name, field, visitor = value.args
        if not (isinstance(parent, ast.Name) and parent.id == "self"
                and isinstance(name, ast.Constant) and name.value == keyword.arg
                and _is_own_field(field, keyword.arg)
                and isinstance(visitor, ast.Name) and visitor.id == "visitor"):
            return None
        plan.append((keyword.arg, value.func.id))
    return tuple(plan)


def _method_source(function) -> str:
    """The source of a method: its lines from the module's text up to the first line indented
    no deeper than its `def` (what inspect.getsource finds, without tokenizing; a method this
    cuts short does not parse, and gets no plan)."""
    code = getattr(function, "__code__", None)
    lines = linecache.getlines(code.co_filename) if code is not None else []
    if not lines:
        return ""
    start = code.co_firstlineno - 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start
    while end < len(lines) and not lines[end].rstrip().endswith(":"):
        end += 1  # the rest of a signature written over several lines
    end += 1
    while end < len(lines) and (not lines[end].strip()
                                or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return textwrap.dedent("".join(lines[start:end]))


def _is_own_field(node: ast.expr, field: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == field
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def transform(node: cst.CSTNode, transformer: cst.CSTTransformer, unvisited: frozenset = frozenset()):
    """`node.visit(transformer)`, for a transformer without per-attribute hooks whose
    `on_visit` always returns True (RuleRunner). Children whose type is in `unvisited` are
    not entered (see the module docstring)."""
    transformer.on_visit(node)
    plan = visit_plan(type(node))
    if plan is None:
        updated = node._visit_and_replace_children(transformer)
    else:
        changes = None
        for field, helper in plan:
            value = getattr(node, field)
            if helper in _MANY:
                new = _sequence(value, transformer, helper == "visit_body_sequence", unvisited)
                if new is None:
                    continue
            else:
                if value is None or value is _DEFAULT or type(value) in unvisited:
                    continue
                new = transform(value, transformer, unvisited)
                if new is value:
                    continue
                if type(new) is cst.FlattenSentinel or (new is _REMOVE and helper == "visit_required"):
                    raise TypeError(f"We got a {type(new).__name__} while visiting a "
                                    f"{type(value).__name__}. This node's parent does not allow it.")
                if new is _REMOVE:
                    new = None if helper == "visit_optional" else _DEFAULT
            if changes is None:
                changes = {}
            changes[field] = new
        updated = node if changes is None else dataclasses.replace(node, **changes)
    result = transformer.on_leave(node, updated)
    if result is not updated and not isinstance(
        result, (cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel)
    ):
        raise cst.CSTValidationError("Expected a node of type CSTNode or a RemovalSentinel, "
                                     f"but got a return value of {type(result).__name__}")
    return result


def _sequence(children, transformer, body: bool, unvisited: frozenset):
    """The visited children as a tuple, or None when every child came back as itself. `body`:
    libcst's visit_body_sequence, which drops a statement that became empty."""
    out = None
    for index, child in enumerate(children):
        new = child if type(child) in unvisited else transform(child, transformer, unvisited)
        if new is child and out is None:
            continue
        if out is None:
            out = list(children[:index])
        if new is _REMOVE:
            continue
        items = new if type(new) is cst.FlattenSentinel else (new,)
        for item in items:
            if body and not child._is_removable() and item._is_removable():
                continue
            out.append(item)
    return None if out is None else tuple(out)


def transform_module(module: cst.Module, transformer: cst.CSTTransformer) -> cst.Module:
    """`module.visit(transformer)` (a removed module keeps its encoding and layout)."""
    result = transform(module, transformer, getattr(transformer, "unvisited_types", frozenset()))
    if isinstance(result, cst.RemovalSentinel):
        return module.with_changes(body=(), header=(), footer=())
    return result


def _token_types() -> frozenset[type]:
    whitespace = (cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace,
                  cst.EmptyLine, cst.Newline, cst.Comment)
    punctuation = (cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen,
                   cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
                   cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.ImportStar, cst.Asynchronous,
                   cst.ParamStar, cst.ParamSlash)
    numbers = (cst.Integer, cst.Float, cst.Imaginary)
    operators = (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
                 cst.BaseAugOp)
    return frozenset(whitespace + punctuation + numbers + tuple(
        node_type for node_type in vars(cst).values()
        if isinstance(node_type, type) and issubclass(node_type, operators)
        and not node_type.__abstractmethods__
    ))


# Whitespace, comments, punctuation, operators and number literals: nodes whose subtrees hold
# nothing but these (tests/test_traversal.py checks it against libcst's field annotations).
# Over half of a module's nodes; a transformer that hooks none of them need not enter them.
TOKEN_TYPES = _token_types()
