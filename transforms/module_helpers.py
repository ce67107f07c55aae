"""Module-level helper functions that rewrites ask for, inserted once at the end of the run.

A rule that rewrites a site into a call of a helper (`_pmap_style_shard_map`,
`_device_put_replicated`, ...) asks for it with `request_helper`; the pipeline inserts every
requested helper after all rules ran, so no rule sees line numbers shifted by another rule's
insertion, and each helper is written at most once (a module that already defines it, for
example because it was migrated before, keeps its own copy). With a helper module
(`--helper-module pkg.mod`), the module imports the helpers from there instead; the
migrator writes that module (migrator/helper_module.py).

A helper's name in a module is chosen by `helper_name`: its own name (`_device_put_sharded`),
or where the module already uses that name for something of its own, the first free
`_device_put_sharded_2`, `_3`, ... (the global style's `fresh_name` convention). A helper the
tool wrote before (its marker comment above the `def`, or imported from the helper module)
keeps its name, so a second run changes nothing. Rules ask for helpers by their own name;
the text inserted, and the import from a helper module (`import _x as _x_2`), use the chosen
one.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re

import libcst as cst

from transforms.helpers.helper_templates import MARKER
from transforms.imports import RuleContext, add_import, is_module_dunder

_SCRATCH_KEY = "pmap_migrate.helpers"
_NAMES_KEY = "pmap_migrate.helper_names"
# The `--helper-module` of this run (pipeline.run_rules sets it): imports from there are ours.
HELPER_MODULE_KEY = "pmap_migrate.helper_module"

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
_RENAMED = re.compile(r"^(?P<base>_\w+?)_[0-9]+$")


def helper_base(name: str) -> str | None:
    """The helper a local name can be: `_device_put_sharded` or `_device_put_sharded_2` ->
    `_device_put_sharded`; None for any other name."""
    if name in HELPER_NAMES:
        return name
    match = _RENAMED.match(name)
    return match["base"] if match and match["base"] in HELPER_NAMES else None


class HelperNames:
    """Which name each helper gets in one module (see the module docstring)."""

    def __init__(self, module: cst.Module, tree: ast.Module | None, helper_module: str | None):
        self.ours = own_helpers(module, helper_module)  # local name -> helper
        self.used = used_names(tree) if tree is not None else _identifiers(module.code)
        self._chosen: dict[str, str] = {}

    def of(self, base: str) -> str:
        if base not in self._chosen:
            self._chosen[base] = self._choose(base)
        return self._chosen[base]

    def _choose(self, base: str) -> str:
        candidate, number = base, 1
        while candidate in self.used and self.ours.get(candidate) != base:
            number += 1
            candidate = f"{base}_{number}"
        return candidate


def helper_names(context: RuleContext, module: cst.Module, tree: ast.Module | None = None
                 ) -> HelperNames:
    """The module's `HelperNames`, computed on the first question (`module`: the input
    module; `tree`: its `ast`, when the caller has it)."""
    names = context.scratch.get(_NAMES_KEY)
    if names is None:
        names = context.scratch[_NAMES_KEY] = HelperNames(
            module, tree, context.scratch.get(HELPER_MODULE_KEY))
    return names


def helper_name(context: RuleContext, base: str, module: cst.Module,
                tree: ast.Module | None = None) -> str:
    """The name helper `base` has in this module: its own, or `base_2`, ... where the module
    uses its own for something else."""
    return helper_names(context, module, tree).of(base)


def own_helpers(module: cst.Module, helper_module: str | None = None) -> dict[str, str]:
    """local name -> helper, for the helpers this tool put in `module` before: top-level defs
    under the marker comment, and names imported from the helper module."""
    ours: dict[str, str] = {}
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            base = helper_base(statement.name.value)
            marked = any(line.comment is not None and line.comment.value.startswith(MARKER)
                         for line in statement.leading_lines)
            if base and marked:
                ours[statement.name.value] = base
        elif helper_module is not None and isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if not (isinstance(small, cst.ImportFrom) and not small.relative
                        and small.module is not None
                        and isinstance(small.names, (list, tuple))
                        and cst.Module([]).code_for_node(small.module) == helper_module):
                    continue
                for alias in small.names:
                    if isinstance(alias.name, cst.Name) and alias.name.value in HELPER_NAMES:
                        local = alias.asname.name.value if alias.asname else alias.name.value
                        ours[local] = alias.name.value
    return ours


def used_names(tree: ast.Module) -> set[str]:
    """Every name the module binds or reads anywhere (a helper must shadow none of them)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def _identifiers(code: str) -> set[str]:
    """Every identifier-like word of `code`: more than it uses, for code `ast` cannot read."""
    return set(re.findall(r"[A-Za-z_]\w*", code))


def renamed_text(text: str, renamed: dict[str, str]) -> str:
    """A helper's text with the helpers it defines or calls under their names here."""
    for base, local in renamed.items():
        text = re.sub(rf"\b{re.escape(base)}\b", local, text)
    return text


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
    queue; `... import _x as _x_2` where the module names it so); a helper the module already
    defines is neither. `as_text`: each helper is one `HelperText` statement (see there), for
    a module that is only turned into code."""
    helpers = local_helpers(context)
    if helper_module is None:
        return insert_helpers(module, helpers, as_text=as_text)
    defined = {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}
    used = _UsedNames(set(helpers))
    module.visit(used)
    for name in helpers:
        # A helper requested only because another calls it (`_pmap_compat` calls
        # `_pmap_style_shard_map`) is the helper module's business, not an import here.
        if name not in defined and name in used.names:
            base = helper_base(name)
            add_import(context, helper_module, base, asname=None if name == base else name,
                       first_party=True)
    return module


def local_helpers(context: RuleContext) -> dict[str, str]:
    """The requested helpers under their names in this module: local name -> text."""
    helpers = requested_helpers(context)
    names: HelperNames | None = context.scratch.get(_NAMES_KEY)
    if names is None:
        return helpers
    renamed = {base: names.of(base) for base in helpers if names.of(base) != base}
    return {names.of(base): renamed_text(text, renamed) if renamed else text
            for base, text in helpers.items()}


class _UsedNames(cst.CSTVisitor):
    """Which of `wanted` a module's code refers to."""

    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.wanted:
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
