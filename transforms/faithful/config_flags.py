"""Fold away the `jax_pmap_shmap_merge` flag, which JAX 0.10 removed (research §8.13).

Reading it (`jax.config.jax_pmap_shmap_merge`, `jax.config.read(...)`) or setting it
(`jax.config.update(...)`) raises AttributeError on JAX >= 0.10, whose only pmap is the one the
flag switched on. So every test of the flag is folded as if it were True, the way JAX 0.8-0.9
ran by default: `if` statements collapse to the branch for the new pmap, `a if flag else b` to
`a`, and `update(...)` statements are removed. `getattr(jax.config, FLAG, default)` and
`hasattr(jax.config, FLAG)` fold the same way: they are guards around reading or setting the
flag, and the code they guard is folded with them. Any other reference (assigned, passed,
compared, an environment variable) is reported, not rewritten.

This rule REMOVES LINES, so it must stay the last rule of the pipeline: the rules after it would
otherwise report positions of a shifted module.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.reading.layout import spaced, stand_in
from transforms.reading.snippets import find_all
from transforms.reading.snippets import one_line as _code
from transforms.reporting import ReportingTransformer

FLAG = "jax_pmap_shmap_merge"
CONFIG = "jax.config"
# Spellings a test of the flag can take; each folds to True (see the module docstring).
FLAG_ATTRIBUTE = f"{CONFIG}.{FLAG}"
READ_CALLS = {f"{CONFIG}.read"}
GUARD_CALLS = {"builtins.getattr", "builtins.hasattr"}
UPDATE_CALLS = {f"{CONFIG}.update"}


class ConfigFlags(ReportingTransformer):
    PREFILTER_WORDS = (rb"(?i:jax_pmap_shmap_merge)",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._handled: set[cst.CSTNode] = set()  # flag references a fold or a removal consumes
        self._folds: set[cst.If | cst.IfExp] = set()  # tests folded again on leaving them

    # -- recognising the flag -----------------------------------------------------------

    def _is_flag_string(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.SimpleString) and node.evaluated_value == FLAG

    def _flag_read(self, node: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The flag references of `node` when it reads the flag (folds to True), else None."""
        if isinstance(node, cst.Attribute) and FLAG_ATTRIBUTE in self._qualified(node):
            return [node]
        if not isinstance(node, cst.Call) or not node.args:
            return None
        qualified = self._qualified(node.func)
        args = node.args
        if qualified & READ_CALLS and len(args) == 1 and self._is_flag_string(args[0].value):
            return [args[0].value]
        if (
            qualified & GUARD_CALLS
            and 2 <= len(args) <= 3
            and CONFIG in self._qualified(args[0].value)
            and self._is_flag_string(args[1].value)
        ):
            return [args[1].value]
        return None

    def _update_call(self, node: cst.CSTNode) -> cst.SimpleString | None:
        """The flag string of `jax.config.update("jax_pmap_shmap_merge", value)`."""
        if (
            isinstance(node, cst.Call)
            and self._qualified(node.func) & UPDATE_CALLS
            and node.args
            and self._is_flag_string(node.args[0].value)
        ):
            return node.args[0].value
        return None

    # -- folding a test -------------------------------------------------------------------

    def _fold(
        self, node: cst.BaseExpression, used: list, updated: cst.BaseExpression | None = None
    ) -> bool | cst.BaseExpression:
        """Evaluate what the flag decides in `node`: True/False, or the rest of the test when
        it also depends on other things. Consumed flag references are appended to `used`.
        `updated`: the same test as the rules before this one left it; the rest is made of
        its parts (the decisions are taken on `node`, whose names have metadata)."""
        if updated is None or type(updated) is not type(node):
            updated = node
        read = self._flag_read(node)
        if read is not None:
            used.extend(read)
            return True
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._fold(node.expression, used, updated.expression)
            if isinstance(inner, bool):
                return not inner
            operator = updated.operator
            if not inner.lpar:  # `not(a and b)` -> `not b`
                operator = operator.with_changes(whitespace_after=spaced(operator.whitespace_after))
            return updated.with_changes(operator=operator, expression=inner)
        if isinstance(node, cst.BooleanOperation):
            left = self._fold(node.left, used, updated.left)
            right = self._fold(node.right, used, updated.right)
            is_and = isinstance(node.operator, cst.And)
            if isinstance(left, bool):
                if left != is_and:
                    return left  # True or R -> True; False and R -> False
                return right if isinstance(right, bool) else stand_in(updated, right)
            if isinstance(right, bool) and right == is_and:
                return stand_in(updated, left)  # L and True -> L; L or False -> L
            if isinstance(right, bool):
                right = cst.Name(str(right))  # L and False / L or True: L still runs
            operator = updated.operator
            if not left.lpar:  # `(a)and(flag or b)` -> `a and b`
                operator = operator.with_changes(whitespace_before=spaced(operator.whitespace_before))
            if not right.lpar:
                operator = operator.with_changes(whitespace_after=spaced(operator.whitespace_after))
            return updated.with_changes(left=left, operator=operator, right=right)
        return updated

    def _fold_test(self, test: cst.BaseExpression) -> bool | cst.BaseExpression | None:
        """The folded test, or None when the flag is not (only) read in a foldable way."""
        used: list[cst.CSTNode] = []
        folded = self._fold(test, used)
        if not used:
            return None
        if not isinstance(folded, bool) and _mentions_flag(folded):
            return None  # e.g. `f(jax.config.jax_pmap_shmap_merge) and ...`: report instead
        self._handled.update(used)
        return folded

    # -- visits: decide before the children are visited ------------------------------------

    def visit_If(self, node: cst.If) -> None:
        if self._fold_test(node.test) is not None:
            self._folds.add(node)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.visit_If(node)  # same test field, same folding

    def visit_Expr(self, node: cst.Expr) -> None:
        flag = self._update_call(node.value)
        if flag is not None:
            self._handled.add(flag)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == FLAG and node not in self._handled:
            self._report(node, Code.SHMAP_MERGE_FLAG_REFERENCE,
                         f"`{FLAG}` is read here in a way that cannot be folded "
                         "(JAX 0.10 removed it and reading it raises AttributeError); replace it "
                         "by True, the value for the only pmap JAX 0.10 has")

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if node in self._handled or not _names_flag(node):
            return
        self._report(node, Code.SHMAP_MERGE_FLAG_REFERENCE,
                     f"{node.value} names `{FLAG}`, which JAX 0.10 removed: "
                     "reading or setting the flag raises AttributeError and the environment "
                     "variable / absl flag has no effect; drop it (the new pmap is the only one)")

    # -- leaves: rewrite ------------------------------------------------------------------

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.BaseSuite | cst.FlattenSentinel | cst.RemovalSentinel | cst.If:
        if original_node not in self._folds:
            return updated_node
        folded = self._fold(original_node.test, [], updated_node.test)
        is_elif = isinstance(self._parent(original_node), cst.If)
        if not isinstance(folded, bool):
            if not self._report(original_node, Code.SHMAP_MERGE_FLAG_FOLDED,
                                f"test of `{FLAG}` simplified to "
                                f"`{_code(folded)}` (the flag is True on the only pmap JAX 0.10 has)"):
                return updated_node
            return _with_test(updated_node, stand_in(updated_node.test, folded))
        has_else = original_node.orelse is not None
        branch = "`elif` branch" if is_elif else "`if` branch"
        if folded:
            outcome = f"kept the {branch}" + (", dropped the rest" if has_else else "")
        else:
            outcome = f"dropped the {branch}" + (", kept the rest" if has_else else "")
        if not self._report(original_node, Code.SHMAP_MERGE_FLAG_FOLDED,
                            f"`{FLAG}` test is {folded} for the new "
                            f"pmap, the only one JAX 0.10 has: {outcome}"):
            return updated_node
        if is_elif:  # the replacement fills the `orelse` slot of the `if` above
            if folded:
                return cst.Else(body=updated_node.body, leading_lines=updated_node.leading_lines)
            return updated_node.orelse if updated_node.orelse else cst.RemoveFromParent()
        if folded:
            return _statements(updated_node.body, updated_node.leading_lines)
        orelse = updated_node.orelse
        if orelse is None:
            return cst.RemoveFromParent()
        if isinstance(orelse, cst.If):  # an elif becomes the `if`
            return orelse.with_changes(leading_lines=updated_node.leading_lines)
        return _statements(orelse.body, updated_node.leading_lines)

    def leave_IfExp(
        self, original_node: cst.IfExp, updated_node: cst.IfExp
    ) -> cst.BaseExpression:
        if original_node not in self._folds:
            return updated_node
        folded = self._fold(original_node.test, [], updated_node.test)
        if not isinstance(folded, bool):
            if not self._report(original_node, Code.SHMAP_MERGE_FLAG_FOLDED,
                                f"test of `{FLAG}` simplified to "
                                f"`{_code(folded)}`"):
                return updated_node
            return _with_test(updated_node, stand_in(updated_node.test, folded))
        if not self._report(original_node, Code.SHMAP_MERGE_FLAG_FOLDED,
                            f"`{FLAG}` test folded to {folded}: kept "
                            f"`{_code(original_node.body if folded else original_node.orelse)}`"):
            return updated_node
        kept = updated_node.body if folded else updated_node.orelse
        if updated_node.lpar:  # `(a if flag else b) + 1` -> `(a) + 1`
            kept = kept.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return kept

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        """Remove `jax.config.update(FLAG, value)` statements (the whole line when alone)."""
        body = []
        for original, updated in zip(original_node.body, updated_node.body):
            if isinstance(original, cst.Expr) and self._update_call(original.value) is not None:
                value = original.value.args[1].value if len(original.value.args) > 1 else None
                note = f" (value {_code(value)})" if value is not None else ""
                if self._report(original, Code.SHMAP_MERGE_FLAG_FOLDED,
                                f"removed `jax.config.update(\"{FLAG}\", ...)`"
                                f"{note}: JAX 0.10 removed the flag and runs only the new pmap"):
                    continue
            body.append(updated)
        if len(body) == len(updated_node.body):
            return updated_node
        if not body:
            return cst.RemoveFromParent()
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(body=body)

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        """`if x: jax.config.update(FLAG, v)` on one line: the suite keeps a `pass`."""
        line = self.leave_SimpleStatementLine(original_node, updated_node)
        if isinstance(line, cst.RemovalSentinel):
            return updated_node.with_changes(body=[cst.Pass()])
        return line


def _with_test(node: cst.If | cst.IfExp, test: cst.BaseExpression) -> cst.If | cst.IfExp:
    """`node` testing `test`; a keyword that touched the old test's bracket gets its space."""
    if test.lpar:
        return node.with_changes(test=test)
    if isinstance(node, cst.IfExp):
        return node.with_changes(
            test=test,
            whitespace_after_if=spaced(node.whitespace_after_if),
            whitespace_before_else=spaced(node.whitespace_before_else),
        )
    return node.with_changes(test=test, whitespace_before_test=spaced(node.whitespace_before_test))


def _statements(suite: cst.BaseSuite, leading_lines) -> cst.FlattenSentinel | cst.RemovalSentinel:
    """The statements of a kept branch, to stand in for the whole `if` one level up. The
    comments above the `if` move to the first of them; indentation is relative in libcst, so
    the statements come out dedented."""
    header = []  # the comment after `if ...:` / `else:` stays with the code it described
    if isinstance(suite, cst.SimpleStatementSuite):
        statements = [cst.SimpleStatementLine(
            body=suite.body, trailing_whitespace=suite.trailing_whitespace)]
    else:
        statements = list(suite.body)
        if suite.header.comment is not None:
            header = [cst.EmptyLine(comment=suite.header.comment)]
    if not statements:
        return cst.RemoveFromParent()
    first = statements[0]
    statements[0] = first.with_changes(
        leading_lines=[*leading_lines, *header, *first.leading_lines])
    return cst.FlattenSentinel(statements)


def _names_flag(node: cst.SimpleString) -> bool:
    """The flag, its environment variable or its absl flag (`--jax_pmap_shmap_merge=0`); not
    prose that mentions it."""
    value = node.evaluated_value
    if not isinstance(value, str):
        return False
    return value.lstrip("-").split("=")[0].strip().lower() == FLAG


def _mentions_flag(node: cst.CSTNode) -> bool:
    return bool(
        find_all(node, (cst.Attribute, cst.SimpleString), lambda n: n.attr.value == FLAG
                 if isinstance(n, cst.Attribute) else FLAG in n.value.lower())
    )


