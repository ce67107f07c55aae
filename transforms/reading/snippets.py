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


def find_all(root: cst.CSTNode, types: type | tuple[type, ...], where=None) -> list[cst.CSTNode]:
    """Every node below `root` (and `root` itself) of one of `types` for which `where(node)`
    holds, in source order: what `libcst.matchers.findall` returns for a type matcher, without
    importing libcst.matchers (a quarter of a second)."""
    found: list[cst.CSTNode] = []

    class _Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, types) and (where is None or where(node)):
                found.append(node)
            return True

    root.visit(_Collect())
    return found
