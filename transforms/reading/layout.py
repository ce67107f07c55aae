"""Keeping the layout valid when an edit puts one expression where another stood.

libcst keeps every space, line break and comment as a whitespace node, and a node's whitespace
can be of either kind: `SimpleWhitespace` (spaces on one line) or, inside brackets,
`ParenthesizedWhitespace` (a line break, maybe a comment, then the next line's indent). Code
written by people uses both everywhere (`if (not A or not\\n        B):`). An edit that moves a
part of an expression out of its parentheses, or that removes the brackets around it, must not
assume the first kind: a line break or a comment that was legal inside the brackets is a syntax
error outside them, and a keyword that touched a bracket (`if(x)`, `not(x)`) needs a space once
the bracket is gone.
"""

from __future__ import annotations

import libcst as cst

from transforms.reading.snippets import source

ONE_SPACE = cst.SimpleWhitespace(" ")


def is_empty(whitespace: cst.BaseParenthesizableWhitespace) -> bool:
    """No character at all between two tokens (`not(x)`, `if(x)`); a line break is not empty."""
    return isinstance(whitespace, cst.SimpleWhitespace) and not whitespace.value


def spaced(whitespace: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """The same whitespace, or one space where there was none."""
    return ONE_SPACE if is_empty(whitespace) else whitespace


def spans_lines(node: cst.CSTNode) -> bool:
    """The node's code holds a line break (a comment in an expression always ends with one),
    so it may rely on the brackets around it. A multi-line string counts too: harmless."""
    text = source(node)
    return "\n" in text or "\r" in text


def stand_in(replaced: cst.BaseExpression, part: cst.BaseExpression) -> cst.BaseExpression:
    """`part` (an operand of `replaced`, or another expression) to stand where `replaced`
    stood. It takes `replaced`'s parentheses when it has none of its own and spans lines inside
    them: `(a and\\n b)` -> `b` is fine, but `(a and not\\n b)` -> `not\\n b` needs them."""
    if part is replaced or part.lpar or not replaced.lpar or not spans_lines(part):
        return part
    return part.with_changes(lpar=replaced.lpar, rpar=replaced.rpar)
