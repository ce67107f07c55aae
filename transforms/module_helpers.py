"""Module-level helper functions that rewrites ask for, inserted once at the end of the run.

A rule that rewrites a site into a call of a helper (`_pmap_style_shard_map`,
`_device_put_replicated`, ...) asks for it with `request_helper`; the pipeline inserts every
requested helper after all rules ran, so no rule sees line numbers shifted by another rule's
insertion, and each helper is written at most once (a module that already defines it, for
example because it was migrated before, keeps its own copy). With a helper module
(`--helper-module pkg.mod`), the module imports the helpers from there instead; the
migrator writes that module (migrator/helper_module.py).
"""

from __future__ import annotations

import ast
import dataclasses
import functools

import libcst as cst

from transforms.imports import RuleContext, add_import, is_module_dunder

_SCRATCH_KEY = "pmap_migrate.helpers"

# Every helper a rule can ask for, in the order a helper module lists them (the code of each is
# transforms/templates/NAME.py). Notebooks use this list to give each helper to the first cell
# that needs it only; a new helper must be added here.
HELPER_ORDER = (
    "_pmap_style_shard_map",  # transforms/helpers/runtime_helper.py
    "_pmap_compat",  # transforms/helpers/pmap_compat_helper.py
    "_nested_pmap_shard_map",  # transforms/helpers/nested_pmap_helper.py
    "_device_put_replicated",  # transforms/helpers/placement_helpers.py
    "_device_put_sharded",  # transforms/helpers/placement_helpers.py
    "_first_replica",  # transforms/faithful/unreplicate.py
)
HELPER_NAMES = frozenset(HELPER_ORDER)


def request_helper(context: RuleContext, name: str, source: str) -> None:
    """Ask for the top-level function `name` (whose full text is `source`) in this module."""
    if name not in HELPER_NAMES:
        raise ValueError(f"{name}: add it to transforms.module_helpers.HELPER_NAMES")
    context.scratch.setdefault(_SCRATCH_KEY, {}).setdefault(name, source)


def requested_helpers(context: RuleContext) -> dict[str, str]:
    return context.scratch.get(_SCRATCH_KEY, {})


def provide_helpers(
    module: cst.Module, context: RuleContext, helper_module: str | None = None,
    *, as_text: bool = False,
) -> cst.Module:
    """The requested helpers, defined in `module`, or with `helper_module` imported from it
    (`from pkg.helpers import _pmap_style_shard_map`, absolute, through the context's import
    queue); a helper the module already defines is neither. `as_text`: each helper is one
    `HelperText` statement (see there), for a module that is only turned into code."""
    helpers = requested_helpers(context)
    if helper_module is None:
        return insert_helpers(module, helpers, as_text=as_text)
    defined = {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}
    used = _UsedHelpers()
    module.visit(used)
    for name in helpers:
        # A helper requested only because another calls it (`_pmap_compat` calls
        # `_pmap_style_shard_map`) is the helper module's business, not an import here.
        if name not in defined and name in used.names:
            add_import(context, helper_module, name, first_party=True)
    return module


class _UsedHelpers(cst.CSTVisitor):
    """The helper names a module's code refers to."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in HELPER_NAMES:
            self.names.add(node.value)


def insert_helpers(
    module: cst.Module, helpers: dict[str, str], *, as_text: bool = False
) -> cst.Module:
    """Insert the helpers right after the leading docstring and imports, so they exist before
    any statement can call them at import time. Written with the module's own newline, so a
    CRLF file stays CRLF inside the helpers' strings too. `as_text`: as `HelperText`
    statements, which print the same code."""
    defined = {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}
    missing = {name: text for name, text in helpers.items() if name not in defined}
    if not missing:
        return module
    header_end = 0
    while header_end < len(module.body) and is_header_statement(module.body[header_end]):
        header_end += 1
    index = header_end
    new_statements: list[cst.BaseStatement] = []
    for text in missing.values():
        text = docstrings_indented(text, module.default_indent)
        if as_text:
            new_statements.append(_helper_text(text, module.default_newline, module.default_indent))
        else:
            new_statements.extend(helper_statements(text, module.default_newline))
    statements = list(module.body)
    if index < len(statements):
        following = statements[index]
        blank = [ln for ln in following.leading_lines if ln.comment is None]
        if len(blank) < 2:
            statements[index] = following.with_changes(
                leading_lines=[cst.EmptyLine()] * (2 - len(blank)) + list(following.leading_lines)
            )
    return module.with_changes(body=statements[:index] + new_statements + statements[index:])


@functools.lru_cache(maxsize=64)
def helper_statements(text: str, newline: str) -> tuple[cst.BaseStatement, ...]:
    """A helper's statements, marker comment first; parsed once per process (nodes are
    immutable, so every module can share them)."""
    parsed = cst.parse_module(text.replace("\n", newline))
    body = list(parsed.body)
    marker = [ln for ln in (*parsed.header, *body[0].leading_lines) if ln.comment]
    body[0] = body[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *marker])
    return tuple(body)


@dataclasses.dataclass(frozen=True)
class HelperText(cst.BaseStatement):
    """A helper's statements as the code they print, for a module that is only turned into
    code: `code` is what codegen of `helper_statements` prints at the top level of a module
    with the same newline and indentation, so the output is byte for byte the same. Codegen of
    the ~200 lines of helpers in every migrated file was more than half of its output's codegen.
    Never seen by a rule, a visitor or libcst's codemod (transforms/codemod.py inserts the
    statements themselves)."""

    code: str

    def _visit_and_replace_children(self, visitor) -> HelperText:
        return self

    def _codegen_impl(self, state) -> None:
        state.add_token(self.code)


@functools.lru_cache(maxsize=64)
def _helper_text(text: str, newline: str, indent: str) -> HelperText:
    return HelperText(printed_helper(text, newline, indent))


def printed_helper(text: str, newline: str, indent: str) -> str:
    """What the statements of `helper_statements(text, newline)` print at the top level of a
    module indented with `indent`. A helper's text is a marker comment line followed by a
    `def` and written with 4-space indentation; libcst prints its parse unchanged, so in a
    4-space module it is the text itself after the two blank lines `helper_statements` puts
    before the marker (tests/test_traversal.py checks every helper against libcst's codegen).
    Parsing and printing a helper costs each worker process ~50 ms."""
    marker, _, rest = text.partition("\n")
    if indent == "    " and marker.startswith("#") and rest.startswith("def "):
        return newline * 2 + text.replace("\n", newline)
    statements = helper_statements(text, newline)
    return cst.Module(body=statements, default_newline=newline, default_indent=indent).code


def is_header_statement(stmt: cst.CSTNode) -> bool:
    """Docstrings, imports and module dunders (`__all__ = [...]`, `__version__ = "1.0"`, which
    PEP 8 puts between the docstring and the imports): the part of a module the helpers go
    after. A dunder whose value calls anything is not header: it could need a helper."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return all(
        isinstance(s, (cst.Import, cst.ImportFrom))
        or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString)))
        or is_module_dunder(s)
        for s in stmt.body
    )


@functools.lru_cache(maxsize=64)
def docstrings_indented(text: str, indent: str) -> str:
    """`text`, code written with 4-space indentation, with the continuation lines of its
    docstrings indented as `indent` indents the code around them. libcst prints inserted code
    with the module's own indentation (2 spaces in Google-style code) but a string as it is
    written, so a docstring would otherwise keep 4-space continuation lines under a 2-space
    body. Only docstrings change, and only in their leading whitespace, which help() and
    inspect.cleandoc strip anyway."""
    if indent == "    ":
        return text
    lines = text.split("\n")
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or \
                not (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                     and isinstance(body[0].value.value, str)):
            continue
        for i in range(body[0].lineno, body[0].end_lineno):  # the lines after the first
            stripped = lines[i].lstrip(" ")
            width = len(lines[i]) - len(stripped)
            if stripped:
                lines[i] = indent * (width // 4) + " " * (width % 4) + stripped
    return "\n".join(lines)
