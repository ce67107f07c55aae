"""Function-local global sites move to module level, so that jit's cache keeps them.

`jax.pmap(f, ...)` built inside a function is cheap to rebuild: pmap caches its compiled
program on `f`. Its global-style spelling, `jax.jit(jax.shard_map(f, ...))`, is not: each call
of the function makes a new shard_map object, and jit traces and compiles it again (measured:
a corpus `run()` went from 5 ms to 166 ms). A careful human builds the jitted step once, at
module level, and so do we, where that is provably the same callable:

- every name the construction reads is bound once at module level, above the function, and
  never declared `global` (so import time sees the value the call would have seen);
- an assigned site's local name is bound nowhere else in its function, is not a builtin, and
  appears in no other top-level statement (so no other code sees the new module name);
- an inline site (`jax.pmap(f, ...)(x)`) of a module-level `f` gets a new module name,
  `<f>_sharded`, that the module does not use;
  an inline site of a lambda is moved only when it is the whole value of `name = ...`, and is
  named `<name>_sharded` (`sq = jax.pmap(lambda v: v * v)(x)` calls `sq_sharded`);
- the statement stands alone on its lines, and is not the only statement of its block.

Everything else stays where it is (correct, only slower). The pass edits the text of the
rewritten module, by the positions Python's own parser gives.
"""
from __future__ import annotations

import ast
import builtins
import re
from collections import Counter
from dataclasses import dataclass

from transforms.global_view.site_shapes import free_name_nodes
from transforms.global_view.step_text import indent_unit, shifted, step_def

# Added to the module's imports after this pass runs.
ADDED_IMPORTS = frozenset({"P", "AxisType", "NamedSharding"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class _Move:
    owner: ast.FunctionDef
    text: str  # the module-level statement
    cut: tuple[int, int] | None  # whole lines to remove (assigned site), 1-based inclusive
    span: tuple[int, int, int, int] | None = None  # inline: the jit(...) expression to rename
    name: str = ""
    mapped: str = ""  # inline: the mapped function's name


def hoist_local_sites(text: str, jax: str, assigned: set[tuple[str, str]],
                      inline: set[tuple[str, str]], params: dict[tuple[str, str], str],
                      partial: str) -> tuple[str, dict[tuple[str, str], str]]:
    """`text` with the hoistable local sites moved above their functions, and the module name
    each moved site got, keyed as given.

    `assigned`: (function, local name) of `name = jax.jit(jax.shard_map(...))` sites;
    `inline`: (function, mapped function name) of `jax.jit(jax.shard_map(f, ...))(...)` sites;
    `params`: the parameters of each one's mapped function. At module level each becomes a
    jitted def (step_text.py), so that its mesh is built at its first call, not at import.
    """
    if not assigned and not inline:
        return text, {}
    tree = ast.parse(text)
    unit = indent_unit(tree, text.splitlines())
    lines = text.splitlines(keepends=True)
    bindings = _module_bindings(tree)
    declared_global = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    # In how many top-level statements each identifier appears: a hoisted name must be new to
    # every statement but its own function.
    statements_using = Counter(i for s in tree.body for i in _identifiers(s))
    moves: list[_Move] = []
    for owner in tree.body:
        if not isinstance(owner, ast.FunctionDef):
            continue
        start = _first_line(owner)

        def readable(value: ast.AST, before: int = start) -> bool:
            return not _multiline_string(value) and not _reads_attribute_when_built(value) \
                and all(_module_constant(n, bindings, declared_global, before)
                        for n in _free_names(value))

        for statement, parent_body in _statements(owner):
            target = _assigned_site(statement, jax)
            if target is None or (owner.name, target) not in assigned:
                continue
            if (len(parent_body) == 1 or target in bindings or target in declared_global
                    or hasattr(builtins, target) or statements_using[target] > 1
                    or _local_bindings(owner, target) != 1 or not readable(statement.value)
                    or not _alone_on_lines(statement, lines)):
                continue
            first = _comments_above(statement.lineno, lines)
            comments = [line.lstrip() for line in lines[first - 1:statement.lineno - 1]]
            definition = _as_def(target, statement.value, params[(owner.name, target)], jax,
                                 partial, text, unit)
            moves.append(_Move(owner, "".join(comments) + definition,
                               (first, statement.end_lineno), name=target))
        targets = {id(s.value): s.targets[0].id for s, _ in _statements(owner)
                   if isinstance(s, ast.Assign) and len(s.targets) == 1
                   and isinstance(s.targets[0], ast.Name)}
        calls = (n for n in _scope_walk(owner) if isinstance(n, ast.Call))
        for call in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
            built = _inline_site(call, jax)
            if built is None:
                continue
            function = built.args[0].args[0]
            mapped = inline_key(function)
            if isinstance(function, ast.Name):
                name = f"{mapped}_sharded"
            elif id(call) in targets:  # `sq = jax.jit(jax.shard_map(lambda v: ...))(x)`
                name = f"{targets[id(call)]}_sharded"
            else:
                continue
            if (owner.name, mapped) not in inline or name in used or not readable(built):
                continue
            definition = _as_def(name, built, params[(owner.name, mapped)], jax, partial, text,
                                 unit)
            moves.append(_Move(owner, definition, None,
                               (built.lineno, built.col_offset, built.end_lineno, built.end_col_offset),
                               name, mapped))
    moves = sorted(_without_clashes(moves), key=lambda m: m.cut[0] if m.cut else m.span[0])
    if not moves:
        return text, {}
    names = {(m.owner.name, m.name if m.cut is not None else m.mapped): m.name for m in moves}
    return _apply(text, lines, moves), names


def _identifiers(statement: ast.stmt) -> set[str]:
    """Every name the statement reads, binds or declares (attribute names are not names)."""
    names = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _without_clashes(moves: list[_Move]) -> list[_Move]:
    """One module name, one value. An assigned site's name is hoisted only if no other site
    wants it; an inline site's new name may be shared by inline sites of the same text."""
    by_name: dict[str, list[_Move]] = {}
    for move in moves:
        by_name.setdefault(move.name, []).append(move)
    kept = []
    for group in by_name.values():
        if len(group) == 1 or (all(m.cut is None for m in group)
                               and len({m.text for m in group}) == 1):
            kept += group
    return kept


def _apply(text: str, lines: list[str], moves: list[_Move]) -> str:
    """Cut the assigned sites, rename the inline ones, and put each hoisted statement (once)
    above its function and the comments that introduce it."""
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-8")))
    data = text.encode("utf-8")
    edits: list[tuple[int, int, bytes]] = []
    above: dict[int, list[str]] = {}
    placed: set[str] = set()
    for move in moves:
        if move.cut is not None:
            first, last = move.cut
            edits.append((offsets[first - 1], offsets[last], b""))
        else:
            line, col, end_line, end_col = move.span
            edits.append((offsets[line - 1] + col, offsets[end_line - 1] + end_col,
                          move.name.encode("utf-8")))
        if move.name not in placed:
            placed.add(move.name)
            above.setdefault(_insertion_line(move.owner, lines), []).append(move.text)
    for line, texts in above.items():
        block = "\n\n".join(texts) + "\n\n"  # defs: two blank lines around each
        edits.append((offsets[line - 1], offsets[line - 1], block.encode("utf-8")))
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:start] + new + data[end:]
    return data.decode("utf-8")


def _insertion_line(owner: ast.FunctionDef, lines: list[str]) -> int:
    """The function's first line, or the first of the comment lines right above it."""
    return _comments_above(_first_line(owner), lines)


def _comments_above(line: int, lines: list[str]) -> int:
    """The first of the comment lines right above `line` (they introduce it), or `line`."""
    while line > 1 and lines[line - 2].lstrip().startswith("#"):
        line -= 1
    return line


def _as_def(name: str, built: ast.Call, params: str, jax: str, partial: str, text: str,
            unit: str = "    ") -> str:
    """`jax.jit(jax.shard_map(f, **options), **jit_options)` as the module-level def `name`."""
    shard = built.args[0]
    line = text.splitlines()[shard.args[0].lineno - 1]
    function = shifted(ast.get_source_segment(text, shard.args[0]),
                       -(len(line) - len(line.lstrip())))
    options = [ast.get_source_segment(text, k) for k in shard.keywords]
    jit_options = [ast.get_source_segment(text, k) for k in built.keywords]
    return step_def(name, params, function, options, params, jax, partial, jit_options,
                    unit=unit) + "\n"


def _first_line(function: ast.FunctionDef) -> int:
    return min([function.lineno] + [d.lineno for d in function.decorator_list])


def _assigned_site(statement: ast.stmt, jax: str) -> str | None:
    if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and _is_jit_of_shard_map(statement.value, jax)):
        return statement.targets[0].id
    return None


def inline_key(function: ast.AST) -> str | None:
    """How an inline site's mapped function is named in `inline`: its name, or a lambda's
    normalised text (the same in the original and the rewritten module)."""
    if isinstance(function, ast.Name):
        return function.id
    if isinstance(function, ast.Lambda):
        return ast.unparse(function)
    return None


def _inline_site(node: ast.AST, jax: str) -> ast.Call | None:
    """The `jax.jit(jax.shard_map(f, ...))` of `jax.jit(jax.shard_map(f, ...))(args)`, `f` a
    name or a lambda."""
    if (isinstance(node, ast.Call) and _is_jit_of_shard_map(node.func, jax)
            and inline_key(node.func.args[0].args[0]) is not None):
        return node.func
    return None


def _is_jit_of_shard_map(node: ast.AST, jax: str) -> bool:
    return (_is_call_of(node, jax, "jit") and len(node.args) == 1
            and _is_call_of(node.args[0], jax, "shard_map") and node.args[0].args)


def _is_call_of(node: ast.AST, jax: str, attribute: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == attribute and isinstance(node.func.value, ast.Name)
            and node.func.value.id == jax)


def _statements(function: ast.FunctionDef):
    """Every statement of the function's own scope, with the body list that holds it."""
    stack = [function.body]
    while stack:
        body = stack.pop()
        for statement in body:
            yield statement, body
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    stack.append(inner)
            for handler in getattr(statement, "handlers", ()):
                stack.append(handler.body)
            for case in getattr(statement, "cases", ()):
                stack.append(case.body)


def _scope_walk(function: ast.FunctionDef):
    """The nodes of the function's own scope (not of nested functions, classes or lambdas)."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _local_bindings(function: ast.FunctionDef, name: str) -> int:
    """How often `name` is bound in the function's own scope; any declaration counts twice."""
    count = sum(1 for a in ast.walk(function.args) if isinstance(a, ast.arg) and a.arg == name)
    for node in _scope_walk(function):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            count += 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            count += 2
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            count += sum(1 for a in node.names if (a.asname or a.name.split(".")[0]) == name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                               ast.ExceptHandler)) and node.name == name:
            count += 1
    return count


def _module_bindings(tree: ast.Module) -> dict[str, list[int]]:
    """Module-level name -> the lines of the statements that bind it."""
    bound: dict[str, list[int]] = {}
    stack = list(tree.body)
    while stack:
        statement = stack.pop()
        names: list[str] = []
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [statement.name]
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name.split(".")[0] for a in statement.names]
        else:
            for node in ast.walk(statement):
                if isinstance(node, _SCOPES):
                    continue
                if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    names.append(node.id)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    names.append(node.name)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    stack.extend(s for s in inner if isinstance(s, ast.stmt))
        for name in names:
            bound.setdefault(name, []).append(statement.lineno)
    return bound


def _module_constant(name: str, bindings: dict, declared_global: set[str], before: int) -> bool:
    """Bound once at module level above `before` (or a builtin, or an import added later)."""
    if name in declared_global:
        return False
    lines = bindings.get(name)
    if lines is None:
        return name in ADDED_IMPORTS or hasattr(builtins, name)
    return len(set(lines)) == 1 and lines[0] < before


def _free_names(value: ast.AST) -> set[str]:
    """Names the expression reads from outside it (lambda and comprehension variables aside),
    and any walrus target (it binds in the enclosing function: not hoistable)."""
    return {n.id for n in free_name_nodes(value)}


def _reads_attribute_when_built(value: ast.AST) -> bool:
    """A partial argument other than a constant or a name in the construction (`k=config.x`,
    `k=model.metrics_fn("train")`): evaluated where the site is built, while a module-level def
    would evaluate it at its first call, after any change to what it reads."""
    plain = lambda v: isinstance(v, (ast.Constant, ast.Name)) or (
        isinstance(v, ast.UnaryOp) and isinstance(v.operand, ast.Constant))
    return any(isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
               and ast.unparse(n.func).endswith("partial")
               and not all(plain(v) for v in [*n.args[1:], *(k.value for k in n.keywords)])
               for n in ast.walk(value))


def _multiline_string(value: ast.AST) -> bool:
    return any(n.lineno != n.end_lineno for n in ast.walk(value)
               if isinstance(n, (ast.Constant, ast.JoinedStr)))


def _alone_on_lines(statement: ast.stmt, lines: list[str]) -> bool:
    """Nothing but indentation before it and a comment at most after it."""
    first = lines[statement.lineno - 1].encode("utf-8")
    last = lines[statement.end_lineno - 1].encode("utf-8")
    return (not first[:statement.col_offset].strip()
            and (not last[statement.end_col_offset:].strip()
                 or last[statement.end_col_offset:].strip().startswith(b"#")))


