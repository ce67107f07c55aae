"""pmap `in_axes` / `out_axes` literals -> shard_map `PartitionSpec` literals (rules R3, R5).

A leaf k >= 0 becomes `P(None, ..., None, axis)` with k Nones, `None` becomes `P()`, and the
containers (tuples, nested lists, dicts) are kept, so the result is the same pytree prefix.
Anything the tool cannot prove is refused with the finding code that explains why.
"""

from __future__ import annotations

import libcst as cst

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
    top_level: bool = True,
) -> cst.BaseExpression:
    """Translate one in_axes/out_axes literal, keeping the original layout of containers."""
    if isinstance(node, cst.Name) and node.value == "None":
        return spec_call(spec_func, None, axis_name)
    if isinstance(node, cst.Integer):
        return spec_call(spec_func, int(node.value, 0), axis_name)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        raise AxesNotTranslatable(
            "PM201", f"{what} has the negative axis -{_code(node.expression)}; pmap never supported it"
        )
    if isinstance(node, (cst.Tuple, cst.List)):
        if isinstance(node, cst.List) and top_level and what == "in_axes":
            raise AxesNotTranslatable("PM202", "in_axes is a list; pmap needs a tuple and raises")
        elements = [
            el.with_changes(
                value=axes_to_specs(
                    el.value, spec_func=spec_func, axis_name=axis_name, what=what, top_level=False
                )
            )
            if isinstance(el, cst.Element)
            else _refuse_starred(what)
            for el in node.elements
        ]
        return node.with_changes(elements=elements)
    if isinstance(node, cst.Dict):
        elements = []
        for el in node.elements:
            if not isinstance(el, cst.DictElement):
                _refuse_starred(what)
            elements.append(
                el.with_changes(
                    value=axes_to_specs(
                        el.value, spec_func=spec_func, axis_name=axis_name, what=what, top_level=False
                    )
                )
            )
        return node.with_changes(elements=elements)
    if isinstance(node, (cst.SimpleString, cst.Float, cst.ConcatenatedString, cst.FormattedString)):
        raise AxesNotTranslatable(
            "PM209", f"{what} has the leaf {_code(node)}, which is neither a non-negative int nor None"
        )
    raise AxesNotTranslatable(
        "PM203", f"{what}={_code(node)} is not a literal, so its specs cannot be derived here"
    )


def _refuse_starred(what: str):
    raise AxesNotTranslatable("PM203", f"{what} unpacks another container (*x / **x)")


