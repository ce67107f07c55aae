"""Small views of libcst nodes that several rules print in findings or inspect."""

from __future__ import annotations

import libcst as cst

_EMPTY = cst.Module(body=[])


def source(node: cst.CSTNode) -> str:
    """The node's code as written (a node of any module: default indent and newline)."""
    return _EMPTY.code_for_node(node)


def one_line(node: cst.CSTNode) -> str:
    """The node's code with every run of whitespace made one space, for messages."""
    return " ".join(source(node).split())


def shorten(text: str, limit: int = 60) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parameters(params: cst.Parameters) -> list[cst.Param]:
    """Every parameter a function binds, `*args` and `**kwargs` included."""
    stars = [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return [*params.posonly_params, *params.params, *params.kwonly_params, *stars]
