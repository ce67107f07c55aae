"""What the statements of one scope bind, read from libcst syntax alone (no scopes, no
import table): the blocks, statements, assignment targets and bound names that
pmap_outputs.py collects a scope's bindings from."""

from __future__ import annotations

import libcst as cst


def is_self(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def def_returns_sequence(fn: cst.FunctionDef) -> bool:
    """A `return a, b` / `return [a, b]` in the function's own body."""
    returns = [s for s in small_statements(block(fn)) if isinstance(s, cst.Return)]
    return any(isinstance(r.value, (cst.Tuple, cst.List)) for r in returns)


def block(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    if isinstance(body, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=body.body)]
    return []


def statements(body) -> list[cst.CSTNode]:
    """Every statement of a scope, into if/for/while/with/try/match blocks (and their else,
    except, finally and case parts) but not into nested functions or classes: their bodies
    are other scopes."""
    out: list[cst.CSTNode] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)):
            continue
        parts = [*block(stmt), *getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]
        parts += [p for p in (getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)) if p]
        out.extend(statements(parts))
    return out


def small_statements(body) -> list[cst.BaseSmallStatement]:
    lines = [s for s in statements(body) if isinstance(s, cst.SimpleStatementLine)]
    return [small for line in lines for small in line.body]


def assignments(small: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression | None]]:
    """(target, value) of an assignment; value None when it is not a plain `=`."""
    if isinstance(small, cst.Assign):
        return [(t.target, small.value) for t in small.targets]
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return [(small.target, small.value)]
    if isinstance(small, cst.AugAssign):
        return [(small.target, None)]
    return []


def unpacked_names(target: cst.Tuple | cst.List) -> list[tuple[cst.Name, bool]]:
    """(name, starred) for each name a tuple or list target binds."""
    out = []
    for element in target.elements:
        starred = isinstance(element, cst.StarredElement)
        if isinstance(element.value, cst.Name):
            out.append((element.value, starred))
        elif isinstance(element.value, (cst.Tuple, cst.List)):
            out.extend((name, starred or s) for name, s in unpacked_names(element.value))
    return out


def names_in_target(target: cst.CSTNode) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for name, _ in unpacked_names(target)]
    return []


def other_bound_names(small: cst.CSTNode) -> list[cst.Name]:
    """Names a small statement binds to something that is not a pmap output."""
    if isinstance(small, (cst.Global, cst.Nonlocal)):
        return [item.name for item in small.names]
    if isinstance(small, cst.Del):
        return names_in_target(small.target)
    if isinstance(small, (cst.Import, cst.ImportFrom)):
        if isinstance(small.names, cst.ImportStar):
            return []
        bound = [alias.asname.name if alias.asname else alias.name for alias in small.names]
        return [name if isinstance(name, cst.Name) else _root(name) for name in bound]
    return []


def _root(node: cst.BaseExpression) -> cst.Name:
    while isinstance(node, cst.Attribute):  # `import a.b` binds `a`
        node = node.value
    return node


def bound_by_compound(stmt: cst.CSTNode) -> list[cst.Name]:
    """Loop targets, `with ... as`, `except ... as`: never pmap outputs."""
    if isinstance(stmt, cst.For):
        return names_in_target(stmt.target)
    if isinstance(stmt, cst.With):
        return [n for item in stmt.items if item.asname for n in names_in_target(item.asname.name)]
    if isinstance(stmt, cst.ExceptHandler) and stmt.name is not None:
        return names_in_target(stmt.name.name)
    return []
