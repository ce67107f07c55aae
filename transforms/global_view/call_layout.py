"""The text of a call the global style writes in a caller: on one line where it fits, else one
argument per line, as a formatter would (multiprocess.py's placements and step calls)."""

from __future__ import annotations

from typing import NamedTuple

from transforms.global_view.step_text import LINE_LIMIT
from transforms.global_view.values import AXIS_PLACEHOLDER, MESH_PLACEHOLDER, quoted


class Nested(NamedTuple):
    """An argument that is itself a call: laid out on lines of its own when it does not fit."""

    function: str
    arguments: list
    prefix: str = ""  # `*` for a starred argument

    def __str__(self) -> str:
        return f"{self.prefix}{self.function}({', '.join(map(str, self.arguments))})"


def call_text(function: str, arguments: list, indent: str, column: int, tail: int,
              axis: str | None = None) -> str:
    """`function(arguments)` on one line when it fits, else one argument per line (an argument
    that is a `Nested` call, split the same way where it does not fit on its line, `axis`
    being the mesh axis name it will hold, where known)."""
    flat = f"{function}({', '.join(map(str, arguments))})"
    if "\n" in function:  # `f.lower(\n...\n).compile()(...)`: from the function's last line
        flat_arguments = flat[len(function):]
        if len(as_written(function.rsplit("\n", 1)[1] + flat_arguments)) + tail <= LINE_LIMIT \
                or "\n" in flat_arguments:
            return flat
    elif column + len(as_written(flat)) + tail <= LINE_LIMIT or "\n" in flat:
        return flat
    pad = indent + "    "
    lines = []
    for argument in arguments:
        text = str(argument)
        if isinstance(argument, Nested) and "\n" not in text \
                and len(pad) + len(as_written(text, axis)) + 1 > LINE_LIMIT:
            text = argument.prefix + call_text(argument.function, argument.arguments, pad,
                                               len(pad) + len(argument.prefix), 1, axis)
        lines.append(f"{pad}{text},\n")
    return f"{function}(\n" + "".join(lines) + f"{indent})"


def as_written(text: str, axis: str | None = None) -> str:
    """`text` as long as it will be written (the placeholders' usual spellings, or `axis`)."""
    axis_text = quoted(axis) if axis is not None else '"axis"'
    return text.replace(AXIS_PLACEHOLDER, axis_text).replace(MESH_PLACEHOLDER, "mesh")
