"""Add and remove the imports rules ask for, touching only the module's top-level statements.

Rules queue imports with `add_import` / `remove_import`, on the scratch keys of libcst's own
queue (`AddImportsVisitor.add_needed_import`, `RemoveImportsVisitor.remove_unused_import`),
so imports queued through libcst's API are applied here too, and `apply_queued_imports`
empties both (a libcst `CodemodCommand` running its visitors afterwards finds nothing). The
rules never import libcst.codemod or libcst.matchers: a quarter of a second of start-up, most
of what a command-line run pays before its first file.

libcst's visitors walk the whole module with scope analysis (0.2-0.5 s on a 300-line file,
more than everything else together). Here: an added import joins an existing top-level
`from M import ...` or goes after the last import of the module's header; a removed name goes
only when nothing in the module still loads it (checked with `ast` on the final code).
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from typing import NamedTuple

import libcst as cst

from transforms.import_uses import module_binding_used
from transforms.reading.names import ALWAYS_IMPORTABLE

# libcst's keys (AddImportsVisitor.CONTEXT_KEY, RemoveImportsVisitor.CONTEXT_KEY).
ADD_KEY = "AddImportsVisitor"
REMOVE_KEY = "RemoveImportsVisitor"
PLAIN_KEY = "pmap-migrate: unused plain imports"  # apply_queued_imports(plain_imports=False)


@dataclasses.dataclass
class RuleContext:
    """What the rules use of libcst's `CodemodContext`: the scratch dict (queued imports,
    requested helpers) and the file name. A `CodemodContext` can be passed wherever this is."""

    filename: str | None = None
    scratch: dict = dataclasses.field(default_factory=dict)


class QueuedImport(NamedTuple):
    """An import to add: the fields of libcst's `ImportItem` that the rules use."""

    module_name: str
    obj_name: str | None = None
    alias: str | None = None
    relative: int = 0
    first_party: bool = False


def add_import(context, module: str, obj: str | None = None, asname: str | None = None, *,
               first_party: bool = False) -> None:
    """Queue `import module [as asname]`, or `from module import obj [as asname]`. A
    `first_party` one (the user's own --helper-module) goes after the other imports."""
    context.scratch.setdefault(ADD_KEY, []).append(
        QueuedImport(module, obj, asname, first_party=first_party))


def remove_import(context, module: str, obj: str | None = None, asname: str | None = None) -> None:
    """Queue the removal of `from module import obj [as asname]`, done only if nothing in the
    final module still loads the name; or, with no `obj`, of `import module [as asname]`, done
    only if nothing uses its module-level binding (import_uses.py)."""
    context.scratch.setdefault(REMOVE_KEY, []).append((module, obj, asname))


def apply_queued_imports(module: cst.Module, context: RuleContext, *,
                         plain_imports: bool = True) -> cst.Module:
    """Apply, then forget, the imports queued in `context` (so a caller that runs libcst's
    visitors afterwards, like CodemodCommand, finds nothing left to do). `plain_imports=False`:
    the queued removals of `import jax` are left for remove_unused_plain_imports, which
    decides them on the final text the caller prints anyway."""
    # (libcst's own ImportItem, queued by a CodemodContext, has no first_party)
    first_party = lambda item: getattr(item, "first_party", False)
    for item in sorted(context.scratch.pop(ADD_KEY, []), key=first_party):
        if item.relative:
            raise ValueError("relative imports are not queued by pmap-migrate rules")
        module = _add(module, item.module_name, item.obj_name, item.alias, first_party(item))
    removals = context.scratch.pop(REMOVE_KEY, [])
    if not plain_imports:
        context.scratch[PLAIN_KEY] = [r for r in removals if r[1] is None]
        removals = [r for r in removals if r[1] is not None]
    if removals:
        code = module.code
        try:
            tree = ast.parse(code)
        except SyntaxError:  # grammar newer than this interpreter: keep every import
            return module
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for module_name, obj_name, alias in removals:
            if obj_name is not None and (alias or obj_name) not in loaded:
                module = _remove(module, module_name, obj_name, alias)
            elif obj_name is None and "." not in module_name and not module_binding_used(
                    tree, alias or module_name):
                module = _remove_plain(module, module_name, alias)
    return module


def remove_unused_plain_imports(module: cst.Module, data: bytes, context: RuleContext
                                ) -> tuple[cst.Module, bytes]:
    """The module and its text (`data`, its `bytes`) without the queued `import jax` that
    nothing in `data` uses any more; printed again only when one goes."""
    pending = context.scratch.pop(PLAIN_KEY, [])
    if not pending:
        return module, data
    try:
        tree = ast.parse(data)
    except SyntaxError:  # grammar newer than this interpreter: keep every import
        return module, data
    changed = module
    for module_name, _, alias in pending:
        if "." not in module_name and not module_binding_used(tree, alias or module_name):
            changed = _remove_plain(changed, module_name, alias)
    return (module, data) if changed is module else (changed, changed.bytes)


def _remove_plain(module: cst.Module, module_name: str, alias: str | None) -> cst.Module:
    """Remove `import module_name [as alias]` from the module's top-level imports."""
    for i, j, node in _top_level_imports(module):
        if isinstance(node, cst.Import):
            changed = _without(module, i, j, node, (module_name, alias))
            if changed is not None:
                return changed
    return module


def _without(module: cst.Module, i: int, j: int, node, name: tuple[str, str | None]):
    """`module` without `name` (dotted name, alias) in the import `node` (small statement j of
    statement i), and without the statement once it imports nothing; None: `node` does not
    import that name."""
    kept = [a for a in node.names if _alias_parts(a) != name]
    if len(kept) == len(node.names):
        return None
    if not kept:
        return _replace_small(module, i, j, None)
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return _replace_small(module, i, j, node.with_changes(names=kept))


def _dotted(node: cst.BaseExpression | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _alias_parts(alias: cst.ImportAlias) -> tuple[str, str | None]:
    asname = alias.asname.name.value if alias.asname else None
    return _dotted(alias.name), asname


def _top_level_imports(module: cst.Module):
    """(statement index, small-statement index, node) of every top-level import."""
    for i, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine):
            for j, small in enumerate(statement.body):
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield i, j, small


def _imports_of_sure_trys(module: cst.Module):
    """(statement index, node) of the imports of each top-level `try:` that imports only
    modules a JAX program always has (`try: import jax.numpy as jnp` / `except ImportError:`):
    they always bind, as names.ImportTable reads them, so an import of the same name is not
    added again above them."""
    for i, statement in enumerate(module.body):
        if not isinstance(statement, cst.Try):
            continue
        nodes = [small for line in statement.body.body
                 for small in (line.body if isinstance(line, cst.SimpleStatementLine) else [None])]
        if nodes and all(_always_importable(node) for node in nodes):
            yield from ((i, node) for node in nodes)


def _always_importable(node) -> bool:
    if isinstance(node, cst.Import):
        return all(_dotted(a.name) in ALWAYS_IMPORTABLE for a in node.names)
    if isinstance(node, cst.ImportFrom) and not node.relative and not isinstance(
            node.names, cst.ImportStar):
        return all(f"{_dotted(node.module)}.{_dotted(a.name)}" in ALWAYS_IMPORTABLE
                   for a in node.names)
    return False


def _add(module: cst.Module, module_name: str, obj: str | None, alias: str | None,
         first_party: bool = False) -> cst.Module:
    """`module` with the import, unless a top-level import already binds the name before
    anything reads it. The code that needs the name may sit above the user's own import of it
    (a notebook cell above the one that imports it, a def above a late import): an import is
    reused, or joined, only if no statement above it reads the name; else the new import goes
    into the header like any other."""
    wanted = (obj or module_name, alias)
    bound = alias or (obj if obj is not None else module_name.split(".")[0])
    for i, node in _imports_of_sure_trys(module):  # the same import, inside `try:`
        same_module = _dotted(node.module) == module_name if isinstance(node, cst.ImportFrom) \
            else obj is None
        if same_module and any(_alias_parts(a) == wanted for a in node.names) \
                and not _read_above(module, i, bound):
            return module
    for i, j, node in _top_level_imports(module):
        if obj is None and isinstance(node, cst.Import) and any(
            _alias_parts(a) == wanted for a in node.names
        ):
            if _read_above(module, i, bound):
                continue
            return module
        if obj is not None and isinstance(node, cst.ImportFrom) and not node.relative:
            if _dotted(node.module) != module_name or isinstance(node.names, cst.ImportStar) \
                    or _read_above(module, i, bound):
                continue
            if any(_alias_parts(a) == wanted for a in node.names):
                return module
            names = list(node.names)
            new_alias = _import_alias(obj, alias)
            if isinstance(names[-1].comma, cst.Comma):  # a parenthesised list, trailing comma
                # The new name takes the trailing comma (and the line break before `)`); the
                # old last name gets the separator the list already uses between names.
                if len(names) > 1:
                    between = names[-2].comma
                elif node.lpar is not None:
                    between = cst.Comma(whitespace_after=node.lpar.whitespace_after)
                else:
                    between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                new_alias = new_alias.with_changes(comma=names[-1].comma)
                names[-1] = names[-1].with_changes(comma=between)
            else:
                names[-1] = names[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
            names.append(new_alias)
            new_node = node.with_changes(names=names)
            return _replace_small(module, i, j, new_node)
    if obj is None:
        text = f"import {module_name}" + (f" as {alias}" if alias else "")
    else:
        text = f"from {module_name} import {obj}" + (f" as {alias}" if alias else "")
    statement = cst.parse_statement(text + module.default_newline)
    body = list(module.body)
    placed = None if first_party else _place_among_its_group(body, statement, module_name,
                                                              obj is not None)
    if placed is not None:
        return module.with_changes(body=placed)
    index = _insertion_index(module)
    return module.with_changes(body=body[:index] + [statement] + body[index:])


class _NameReads(cst.CSTVisitor):
    """Whether a statement mentions `name` as a variable (not as an attribute after a dot)."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.found = name, False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value == self.name

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False


def _read_above(module: cst.Module, index: int, name: str) -> bool:
    """Some top-level statement above `module.body[index]` other than an import reads `name`
    (in a function body too: the function may run before the statement at `index` does)."""
    for statement in module.body[:index]:
        if isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body):
            continue
        reads = _NameReads(name)
        statement.visit(reads)
        if reads.found:
            return True
    return False


def _import_facts(statement) -> tuple[str, bool, bool] | None:
    """(module name, is a from-import, is the standard library's) of a top-level line holding one
    absolute import; None for anything else (a `__future__` import, a relative one)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    node = statement.body[0]
    if isinstance(node, cst.Import):
        name, is_from = _dotted(node.names[0].name), False
    elif isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
        name, is_from = _dotted(node.module), True
    else:
        return None
    top = name.split(".")[0]
    return None if top == "__future__" else (name, is_from, top in sys.stdlib_module_names)


def _place_among_its_group(body: list, statement, module_name: str, is_from: bool):
    """`body` with the new import `statement` where isort would put it: in the header's block of
    imports of its kind (the standard library's, or third-party) that holds its package, else
    the first such block, in the order the block keeps. Google's style sorts `import x` and
    `from x import` together by module; isort's default puts every `from` line after the
    `import` lines. A standard library import with no such block opens one above the others.
    None: nothing to go by (no third-party block for a third-party import)."""
    package = module_name.split(".")[0]
    stdlib = package in sys.stdlib_module_names
    header = body[:_insertion_index(cst.Module(body=body))]
    facts = {i: _import_facts(line) for i, line in enumerate(header)}
    blocks: list[list[int]] = []
    for i, line in enumerate(header):
        if facts[i] is None or facts[i][2] != stdlib:
            continue
        joined = blocks and blocks[-1][-1] == i - 1 and not line.leading_lines
        blocks[-1:] = [blocks[-1] + [i]] if joined else [*blocks[-1:], [i]]
    if not blocks:
        first = next((i for i, f in facts.items() if f is not None), None)
        if not stdlib or first is None:
            return None
        moved = body[first]
        return [*body[:first], statement.with_changes(leading_lines=moved.leading_lines),
                moved.with_changes(leading_lines=[cst.EmptyLine()]), *body[first + 1:]]
    block = next((b for b in blocks if any(
        facts[i][0].split(".")[0] == package for i in b)), blocks[0])
    mixed = any(facts[a][1] and not facts[b][1] for a, b in zip(block, block[1:]))
    key = (lambda name, frm: (name.lower(),)) if mixed else (lambda name, frm: (frm, name.lower()))
    new_key = key(module_name, is_from)
    at = next((i for i in block if key(*facts[i][:2]) > new_key), None)
    if at is None:
        return [*body[:block[-1] + 1], statement, *body[block[-1] + 1:]]
    moved = body[at]
    return [*body[:at], statement.with_changes(leading_lines=moved.leading_lines),
            moved.with_changes(leading_lines=[]), *body[at + 1:]]


def _import_alias(obj: str, alias: str | None) -> cst.ImportAlias:
    asname = cst.AsName(name=cst.Name(alias)) if alias else None
    return cst.ImportAlias(name=cst.parse_expression(obj), asname=asname)


def _replace_small(module: cst.Module, i: int, j: int, new: cst.BaseSmallStatement | None) -> cst.Module:
    statement = module.body[i]
    small = list(statement.body)
    if new is None:
        del small[j]
    else:
        small[j] = new
    body = list(module.body)
    if small:
        small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        body[i] = statement.with_changes(body=small)
    else:
        # Keep the statement's leading comments and blank lines on the next statement.
        removed = body.pop(i)
        if i < len(body):
            body[i] = _with_leading_lines(module, body[i], removed.leading_lines,
                                          first=i == 0 and not module.header)
    return module.with_changes(body=body)


def _with_leading_lines(module: cst.Module, statement: cst.BaseStatement, lines,
                        first: bool) -> cst.BaseStatement:
    """`statement` with `lines` (a removed statement's comments and blank lines) above its own;
    as the file's first statement, with no blank line above it. An inserted helper's printed
    text (module_helpers.HelperText) has no leading_lines: the lines become text."""
    if hasattr(statement, "leading_lines"):
        lines = [*lines, *statement.leading_lines]
    while first and lines and lines[0].comment is None:
        lines = lines[1:]
    if hasattr(statement, "leading_lines"):
        return statement.with_changes(leading_lines=lines)
    text = statement.code.lstrip("\r\n") if first and not lines else statement.code
    return dataclasses.replace(statement,
                               code="".join(module.code_for_node(line) for line in lines) + text)


def is_module_dunder(small: cst.CSTNode) -> bool:
    """`__name__ = <literal>`: an assignment of dunder names to a value that calls nothing."""
    if isinstance(small, cst.Assign):
        targets = [t.target for t in small.targets]
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        targets = [small.target]
    else:
        return False
    return all(isinstance(t, cst.Name) and len(t.value) > 4 and t.value.startswith("__")
               and t.value.endswith("__") for t in targets) and \
        not _calls_anything(small.value)


def _calls_anything(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) or any(_calls_anything(c) for c in node.children)


def _insertion_index(module: cst.Module) -> int:
    """After the last import of the header (docstring, module dunders, imports); else after
    the docstring and the dunders, which PEP 8 puts before the imports."""
    index, imported = 0, False
    for i, statement in enumerate(module.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            break
        kinds = {type(s) for s in statement.body}
        if kinds <= {cst.Import, cst.ImportFrom}:
            index, imported = i + 1, True
        elif i == 0 and kinds == {cst.Expr} and isinstance(
            statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)
        ):
            index = 1
        elif all(is_module_dunder(s) for s in statement.body):
            index = index if imported else i + 1
        else:
            break
    return index


def _remove(module: cst.Module, module_name: str, obj: str, alias: str | None) -> cst.Module:
    """Remove `from module_name import obj [as alias]` from the module's top-level imports."""
    for i, j, node in _top_level_imports(module):
        if isinstance(node, cst.ImportFrom) and not node.relative \
                and _dotted(node.module) == module_name and not isinstance(node.names, cst.ImportStar):
            changed = _without(module, i, j, node, (obj, alias))
            if changed is not None:
                return changed
    return module
