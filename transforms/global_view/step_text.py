"""The text of a global step that is defined at module level: a jitted def that calls shard_map.

`jax.shard_map` needs its mesh when it is built, and a module must not build a mesh at import
(the devices are not known yet: `jax.distributed.initialize` may still have to run). So a
step defined at module level is a def: `jax.jit` traces it at its first call, and only then
does `_mesh(axis)` build the mesh. The callers name no mesh context, so the user's own eager
jax.numpy code between the steps runs on one device, as it did under pmap.
"""

from __future__ import annotations

import ast
import io
import tokenize

LINE_LIMIT = 99  # the longest line the global style writes (site_edits.py, multiprocess.py)

# The module-level mesh function every global module gets (post_passes.py adds it once).
MESH_FUNCTION_TEXT = '''@{functools}.cache
def {name}(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return {jax}.make_mesh(({jax}.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))
'''

# pmap's n equal rows of a replicated value, which an f-string field formatted: the migrated
# value is one row (expressions.py `_formatted_stack`; post_passes.py adds it where called).
DEVICE_ROWS_FUNCTION_TEXT = '''def {name}(tree):
    """pmap's n equal rows of replicated `tree`, leaf by leaf, so its f-string text stays."""
    return {jax}.tree.map(lambda v: v[None].repeat({jax}.local_device_count(), axis=0), tree)
'''


def jit_decorator(jax: str, partial: str, jit_options: list[str]) -> str:
    return f"@{partial}({jax}.jit, {', '.join(jit_options)})" if jit_options else f"@{jax}.jit"


def step_def(name: str, params: str, callee: str, options: list[str], mapped: str,
             jax: str, partial: str, jit_options: list[str], indent: str = "",
             unit: str = "    ", prelude=()) -> str:
    """`@jax.jit` (with pmap's donation / static numbering) over `def name(params)` that
    returns `jax.shard_map(callee, options...)(mapped)`; the shard_map call is wrapped the way
    a formatter would wrap it when it does not fit on one line. `unit`: the module's block
    indentation (indent_unit); continuation lines add four spaces, as black and Google's
    style both do. `prelude`: statements the def runs before (a record's spec)."""
    pad = indent + unit
    head = f"{jit_decorator(jax, partial, jit_options)}\n{indent}def {name}({params}):\n" \
        + "".join(f"{pad}{line}\n" for line in prelude)
    arguments = ", ".join([callee, *options])
    one_line = f"{pad}return {jax}.shard_map({arguments})({mapped})"
    if len(one_line) <= LINE_LIMIT and "\n" not in callee:
        return head + one_line
    inner = f"{pad}    {arguments}"
    if len(inner) <= LINE_LIMIT and "\n" not in callee:
        body = inner + "\n"
    else:
        body = f"{pad}    {callee},\n" + "".join(f"{pad}    {o},\n" for o in options)
    return head + f"{pad}return {jax}.shard_map(\n{body}{pad})({mapped})"


def shifted(text: str, by: int) -> str:
    """`text`'s continuation lines moved right by `by` columns (left where negative, never
    into a line's code), so that a multi-line expression keeps its shape where it now stands
    (contract.py, hoist.py). Text with a string over several lines is kept as written: moving
    would change the string."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    if by == 0 or any(t.type == tokenize.STRING and t.start[0] != t.end[0] for t in tokens):
        return text
    first, *rest = text.split("\n")
    moved = []
    for line in rest:
        width = len(line) - len(line.lstrip(" "))
        moved.append(" " * by + line if by > 0 and line.strip() else line[min(-by, width):]
                     if by < 0 else line)
    return "\n".join([first, *moved])


def indent_unit(tree: ast.Module, lines: list[str]) -> str:
    """The indentation a block adds in this module, read off its first indented block at the
    top level (two spaces in Google's style); four spaces when it has none."""
    for statement in tree.body:
        body = getattr(statement, "body", None)
        if statement.col_offset == 0 and isinstance(body, list) and body \
                and body[0].lineno != statement.lineno:
            line = lines[body[0].lineno - 1]
            unit = line[:len(line) - len(line.lstrip())]
            if unit.strip(" \t") == "" and unit:
                return unit
    return "    "
