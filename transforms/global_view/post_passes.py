"""The libcst passes over the edited module: the mesh bound on entry of each global caller
(`mesh = _mesh(axis)`), the module's `_mesh` function added once, and the PM600 notes of the
sites hoist.py moved to module level."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys

import libcst as cst

from transforms.codes.findings import Finding
from transforms.codes.global_view import SITE
from transforms.global_view.axes import MESH
from transforms.global_view.callers import MODULE_CALLER
from transforms.global_view.contract_text import CONTRACT_NAMES, contract_functions_text
from transforms.global_view.dataflow import CallerResult
from transforms.global_view.hoist import hoist_local_sites, inline_key
from transforms.global_view.module_info import ModuleInfo
from transforms.global_view.sites import Site
from transforms.global_view.step_text import DEVICE_ROWS_FUNCTION_TEXT, MESH_FUNCTION_TEXT
from transforms.global_view.values import quoted
from transforms.imports import RuleContext, add_import, apply_queued_imports, remove_import
from transforms.module_helpers import docstrings_indented


def hoist_key(site: Site) -> tuple[str, str] | None:
    """How hoist.py names a function-local site: (function, local name) when assigned,
    (function, mapped function's name or lambda text) when inline; None for sites it does not
    move."""
    if site.owner in (None, MODULE_CALLER):  # top-level code's sites run once, in place
        return None
    if not site.inline:
        return site.owner, site.name
    key = inline_key(site.function_node)
    return None if key is None else (site.owner, key)


def with_hoisting_noted(findings: list[Finding], sites: list[Site], moved: dict) -> list[Finding]:
    """PM600 of each site hoist.py moved says where it went, and why."""
    notes = {}
    for site in sites:
        key = hoist_key(site)
        if key is not None and key in moved:
            notes[(site.node.lineno, site.node.col_offset + 1)] = (
                f"; built once, at module level as `{moved[key]}`")
    return [dataclasses.replace(f, message=f.message + notes[(f.line, f.col)])
            if f.code == SITE and (f.line, f.col) in notes else f for f in findings]


class MeshOnEntry(cst.CSTTransformer):
    """Each global caller that places values binds the mesh they go on, on entry:
    `mesh = _mesh("batch")` (and `mesh_j = _mesh("j")` for its other axes)."""

    def __init__(self, axes: dict[str, str], mesh_function: str, meshes: dict | None = None):
        super().__init__()
        self.axes = axes
        self.mesh_function = mesh_function
        self.meshes = meshes or {}  # caller -> ((name, axis), ...) of its other meshes
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return False

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef):
        self.depth -= 1
        name = original.name.value
        if self.depth or name not in self.axes or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        docstring = []
        if body and _is_docstring(body[0]):
            docstring = [body.pop(0)]
        code = cst.Module(body=body).code
        make = [cst.parse_statement(f"{mesh} = {self.mesh_function}({quoted(axis)})\n")
                for mesh, axis in ((MESH, self.axes[name]), *self.meshes.get(name, ()))
                if re.search(rf"(?<![\w.]){re.escape(mesh)}(?!\w)(?!\s*=[^=])", code)]
        if not make:
            return updated
        return updated.with_changes(body=updated.body.with_changes(body=[*docstring, *make, *body]))


class MeshFunction(cst.CSTTransformer):
    """The module's `_mesh(axis_name)` (and the contract functions), once, above its first
    function or class, or above the first statement that uses them (a module-level
    `step = jax.jit(_per_device_shard_map(...))` runs them at import)."""

    def __init__(self, text: str, import_functools: bool):
        super().__init__()
        self.statements = cst.parse_module(text).body
        self.import_functools = import_functools
        self.functools_placed = not import_functools  # False: no import above the function

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body = list(updated.body)
        names = {s.name.value for s in self.statements
                 if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
        at = next((i for i, s in enumerate(body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))
                   or _names_in(s) & names), len(body))
        if self.import_functools:  # above the function, whose decorator reads it at once
            above = _with_functools(body[:at])
            self.functools_placed = len(above) > at
            body, at = [*above, *body[at:]], len(above)
        first = self.statements[0]
        first = first.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) if at else first
        moved = body[at].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(),
                                                      *_comments(body[at])]) if at < len(body) else None
        rest = [moved, *body[at + 1:]] if moved is not None else []
        return updated.with_changes(body=[*body[:at], first, *self.statements[1:], *rest])


class _Names(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.found: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)


def _names_in(statement: cst.CSTNode) -> set[str]:
    """The names a statement reads or binds (not the words in its strings)."""
    visitor = _Names()
    statement.visit(visitor)
    return visitor.found


def _with_functools(body: list) -> list:
    """`import functools` first among the module's imports (after `__future__` ones), in the
    standard library's group: a blank line follows it when the next import is not stdlib."""
    def imported(statement) -> str | None:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        node = statement.body[0]
        if isinstance(node, cst.Import):
            return cst.Module(body=[]).code_for_node(node.names[0].name).split(".")[0]
        if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
            return cst.Module(body=[]).code_for_node(node.module).split(".")[0]
        return None

    at = next((i for i, s in enumerate(body) if imported(s) not in (None, "__future__")), None)
    if at is None:
        return body
    first = body[at]
    line = cst.parse_statement("import functools\n").with_changes(leading_lines=first.leading_lines)
    if imported(first) in sys.stdlib_module_names:
        return [*body[:at], line, first.with_changes(leading_lines=[]), *body[at + 1:]]
    return [*body[:at], line, first.with_changes(leading_lines=[cst.EmptyLine()]), *body[at + 1:]]


def _spaced_step_defs(module: cst.Module, names: set[str],
                      local: dict[str, set[str]]) -> cst.Module:
    """Two blank lines before and after each step def written at module level, as PEP 8 asks:
    `a = jax.pmap(f)` and `b = jax.pmap(g)` on adjacent lines become two defs; one inside a
    module-level function (pycodestyle's E306), where a site with static arguments or keyword
    calls becomes `@functools.partial(jax.jit, ...)` over a def (`local`: those defs, by
    function). Other code's spacing is the user's and stays as it is."""
    body = _spaced(list(module.body), names, 2)
    for i, statement in enumerate(body):
        if isinstance(statement, cst.FunctionDef) and statement.name.value in local \
                and isinstance(statement.body, cst.IndentedBlock):
            inner = _spaced(list(statement.body.body), local[statement.name.value], 1)
            body[i] = statement.with_changes(body=statement.body.with_changes(body=inner))
    return module.with_changes(body=body)


def _spaced(body: list, names: set[str], count: int) -> list:
    """`body` with at least `count` blank lines before and after each def named in `names`
    (above any comment lines that lead the statement)."""
    def spaced(statement):
        lines = list(getattr(statement, "leading_lines", ()))
        blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        if blank >= count or not hasattr(statement, "leading_lines"):
            return statement
        return statement.with_changes(
            leading_lines=[cst.EmptyLine(indent=False)] * (count - blank) + lines)

    for i, statement in enumerate(body):
        if isinstance(statement, cst.FunctionDef) and statement.name.value in names:
            if i > 0:
                body[i] = spaced(statement)
            if i + 1 < len(body):
                body[i + 1] = spaced(body[i + 1])
    return body


class NoNewSelfAssignments(cst.CSTTransformer):
    """Drops `x = x` and `a, b = (a, b)` the rewrite left where a replicated value was
    unreplicated (`params = jax_utils.unreplicate(params)`: a global array is the value
    itself). One the original had stays, as does one with a comment or alone in its block."""

    def __init__(self, original: ast.Module):
        self.original = {ast.unparse(n) for n in ast.walk(original) if _self_assignment(n)}

    def finds_new(self, tree: ast.Module) -> bool:
        """Whether `tree` (the module this would visit) holds a self-assignment the original
        did not: without one the visit changes nothing, and is skipped."""
        return any(_self_assignment(n) and ast.unparse(n) not in self.original
                   for n in ast.walk(tree))

    def _kept(self, body) -> list:
        kept = []
        for statement in body:
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                    and isinstance(statement.body[0], cst.Assign) \
                    and len(statement.body[0].targets) == 1 \
                    and statement.trailing_whitespace.comment is None \
                    and not any(line.comment for line in statement.leading_lines) \
                    and isinstance(statement.body[0].value, (cst.Name, cst.Tuple)):
                # (a value other than a name or a tuple is no self-assignment: not printed
                # and parsed to find out)
                tree = ast.parse(cst.Module(body=[statement.with_changes(leading_lines=())]).code)
                node = tree.body[0] if tree.body else None
                if _self_assignment(node) and ast.unparse(node) not in self.original:
                    continue
            kept.append(statement)
        return kept if kept else list(body)

    def leave_IndentedBlock(self, original, updated):
        return updated.with_changes(body=self._kept(updated.body))

    def leave_Module(self, original, updated):
        return updated.with_changes(body=self._kept(updated.body))


def _self_assignment(node) -> bool:
    """`x = x` or `a, b = a, b`: names only, assigned their own values."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return False
    target, value = node.targets[0], node.value
    names = target.elts if isinstance(target, ast.Tuple) else [target]
    return all(isinstance(n, ast.Name) for n in names) and \
        ast.unparse(target) == ast.unparse(value)


def _comments(statement) -> list:
    """The comment lines right above a statement (its blank lines are re-made)."""
    return [line for line in statement.leading_lines if line.comment is not None]


def _is_docstring(statement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _user_imports_first(context: RuleContext, tree: ast.Module, names: set) -> None:
    """The code written here reads the module's own names for jax, functools, its `partial`
    and jax.numpy (`@jax.jit`, `@functools.cache`, `@partial(jax.jit, ...)`, `jnp.copy`),
    from wherever the user imports them: possibly only below that code (a later notebook
    cell, after the first def) or only inside a function. Each one's import is queued again;
    imports.py adds it to the header only where no top-level import binds the name before
    its first read, so a module whose imports come first is left as it is."""
    imports = [node for node in ast.walk(tree)  # breadth first: top-level ones come first
               if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)]
    for name in sorted(n for n in names if n):
        for node in imports:
            alias = next((a for a in node.names
                          if (a.asname or a.name.split(".")[0]) == name and a.name != "*"), None)
            if alias is None or (isinstance(node, ast.Import) and alias.asname is None
                                 and alias.name != name):
                continue  # (`import jax.numpy` binds jax too, but is not `import jax`)
            if isinstance(node, ast.Import):
                add_import(context, alias.name, None, alias.asname)
            elif node.module:
                add_import(context, node.module, alias.name, alias.asname)
            break


# flax's pmap-era helpers, whose calls the global style rewrites away: an import of them
# (`from flax import jax_utils`, `from flax.jax_utils import replicate`) left unloaded goes.
_FLAX_PMAP_MODULES = ("flax.jax_utils", "flax.training.common_utils")


def finish_module(text: str, module: ModuleInfo, results: dict[str, CallerResult],
                  global_sites: list[Site], findings: list[Finding],
                  contract: frozenset[str] | None = None, helper_module: str | None = None,
                  mesh_needed: bool = False):
    """The edited module `text` as libcst: each caller's mesh on entry, the `_mesh` function
    (and `_device_rows` where an f-string field calls it), local sites hoisted to module level
    (their PM600s say so), the imports the style names, the contract functions with the features `contract` names (None: no site keeps
    pmap's contract; with `helper_module`, imported from there), and no `from jax import pmap`
    the global sites left unused. `mesh_needed`: the `_mesh` function even with no global
    site here (callers of another module's global steps, cross_module.py). Returns (module,
    findings)."""
    new_module = cst.parse_module(text.encode("utf-8"))
    new_module = new_module.visit(MeshOnEntry({c: r.axis for c, r in results.items()},
                                              module.mesh_function,
                                              {c: r.meshes for c, r in results.items()}))
    functools = next((n for n, full in module.imported.items() if full == "functools"), None)
    texts = [MESH_FUNCTION_TEXT.format(functools=functools or "functools",
                                       name=module.mesh_function, jax=module.jax)
             ] if global_sites or mesh_needed else []
    if contract is not None and helper_module is None:  # the floor's functions, as its sites use them
        texts.append(contract_functions_text(contract, module.contract_names,
                                             functools=functools or "functools", jax=module.jax))
    names_axis_type = bool(texts)  # the mesh functions name it
    if module.device_rows_function in text \
            and module.device_rows_function in _names_in(new_module):  # a field calls it
        texts.append(DEVICE_ROWS_FUNCTION_TEXT.format(name=module.device_rows_function,
                                                      jax=module.jax))
    context = RuleContext()
    if texts:
        text = docstrings_indented("\n\n".join(texts), new_module.default_indent)
        # Its only hook is leave_Module: called on the module itself, not through a visit
        # of every node (the same result, without rebuilding the tree).
        mesh_function = MeshFunction(text, import_functools=functools is None and names_axis_type)
        new_module = mesh_function.leave_Module(new_module, new_module)
        if not mesh_function.functools_placed:  # no import above it: one in the header
            add_import(context, "functools")
    keys = [(s, hoist_key(s)) for s in global_sites]
    assigned = {k for s, k in keys if k is not None and not s.inline}
    inline = {k for s, k in keys if k is not None and s.inline}
    params = {k: ", ".join(s.called_params) for s, k in keys if k is not None}
    hoisted, moved = hoist_local_sites(new_module.code, module.jax, assigned, inline, params,
                                       module.partial)
    if moved:
        new_module = cst.parse_module(hoisted.encode("utf-8"))
        findings = with_hoisting_noted(findings, global_sites, moved)
    local: dict[str, set[str]] = {}
    for site in global_sites:
        if site.owner and (site.static or site.keyword_params) and not site.inline \
                and (site.owner, site.name) not in moved:
            local.setdefault(site.owner, set()).add(site.name)
    new_module = _spaced_step_defs(new_module, {s.name for s in global_sites}, local)
    code = new_module.code
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    dropper = NoNewSelfAssignments(module.tree)
    if tree is None or dropper.finds_new(tree):
        new_module = new_module.visit(dropper)
        code, tree = new_module.code, None
    if names_axis_type:
        add_import(context, "jax.sharding", "AxisType")
    if contract is not None and helper_module is not None:
        used = _names_in(new_module)
        for name in CONTRACT_NAMES:
            local = module.contract_names[name]
            if local in used:
                add_import(context, helper_module, name, None if local == name else local,
                           first_party=True)
    if "NamedSharding(" in code and any(isinstance(n, ast.Name) and n.id == "NamedSharding"
                                        for n in ast.walk(tree or ast.parse(code))):
        add_import(context, "jax.sharding", "NamedSharding")  # not for `jax.sharding.NamedSharding(`
    add_import(context, "jax.sharding", "PartitionSpec", "P")
    if re.search(r"multihost_utils\.(global_array_to_host_local|host_local_array_to_global)_array\(",
                 code):  # (new_module's code: nothing changed it since)
        add_import(context, "jax.experimental", "multihost_utils")
    if module.jax == "jax" and "jax" not in module.imported:
        add_import(context, "jax")
    _user_imports_first(context, module.tree, {module.jax, functools, module.partial.split(".")[0],
                                               module.numpy.split(".")[0]})
    for local, full in module.imported.items():  # removed only where nothing loads it now
        if full == "jax.pmap":
            remove_import(context, "jax", "pmap", None if local == "pmap" else local)
        elif full == "functools.partial" and module.loads.get(local):
            # used before (`@partial(pmap, ...)`), so unused now only because of the rewrite
            remove_import(context, "functools", "partial", None if local == "partial" else local)
        elif full.startswith(_FLAX_PMAP_MODULES) and module.loads.get(local):
            # `from flax import jax_utils` whose replicate / unreplicate / shard calls are gone
            parent, name = full.rsplit(".", 1)
            remove_import(context, parent, name, None if local == name else local)
    return apply_queued_imports(new_module, context), findings
