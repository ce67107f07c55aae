"""pmap `in_axes` / `out_axes` literals -> shard_map `PartitionSpec` literals (rules R3, R5).

A leaf k >= 0 becomes `P(None, ..., None, axis)` with k Nones, `None` becomes `P()`, and the
containers (tuples, nested lists, dicts) are kept, so the result is the same pytree prefix.
The options are read by transforms/reading/pmap_options.py, the reader both styles share;
anything it does not read as a literal tree is refused with the finding code that explains why.
"""

from __future__ import annotations

import libcst as cst

from transforms.reading.pmap_options import first_problem, read_axes_text
from transforms.reading.snippets import source as _code


class AxesNotTranslatable(Exception):
    """in_axes / out_axes that are reported instead of translated."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def spec_call(spec_func: cst.BaseExpression, axis: int | None, axis_name: cst.BaseExpression):
    """`P()` for None, else `P(None, ..., axis_name)` with `axis` leading Nones."""
    if axis is None:
        return cst.Call(func=spec_func.deep_clone())
    entries = [cst.Name("None")] * axis + [axis_name.deep_clone()]
    args = [
        cst.Arg(value=e, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        for e in entries[:-1]
    ] + [cst.Arg(value=entries[-1])]
    return cst.Call(func=spec_func.deep_clone(), args=args)


def axes_to_specs(
    node: cst.BaseExpression,
    *,
    spec_func: cst.BaseExpression,
    axis_name: cst.BaseExpression,
    what: str,
) -> cst.BaseExpression:
    """Translate one in_axes/out_axes literal, keeping the original layout of containers;
    what transforms/reading/pmap_options.py does not read as a literal tree is refused."""
    problem = first_problem(read_axes_text(_code(node), what), what)
    if problem is not None:
        raise AxesNotTranslatable(problem.code, problem.message)
    return _specs(node, spec_func, axis_name)


def _specs(node, spec_func, axis_name):
    if isinstance(node, cst.Name):  # None
        return spec_call(spec_func, None, axis_name)
    if isinstance(node, cst.Integer):
        return spec_call(spec_func, int(node.value, 0), axis_name)
    if isinstance(node, (cst.Tuple, cst.List, cst.Dict)):
        return node.with_changes(elements=[
            el.with_changes(value=_specs(el.value, spec_func, axis_name)) for el in node.elements
        ])
    raise AssertionError(f"not read as an axis tree: {_code(node)}")
