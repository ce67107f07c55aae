"""`ModuleInfo`: one module's source, tree and imported names, with the byte spans of its nodes
and the rendering of edits into them. Built once per module by the driver (rewrite.py) and
shared by every caller's analysis."""

from __future__ import annotations

import ast

from transforms.global_view.axes import fresh_name, module_names
from transforms.global_view.contract_text import DEFINED_NAMES
from transforms.global_view.replication import BodyAnalysis
from transforms.global_view.site_options import constant_defaults_left, string_constants
from transforms.global_view.sites import Site, dotted
from transforms.global_view.step_text import indent_unit
from transforms.global_view.values import (DEVICE_ROWS_FUNCTION, MESH_FUNCTION, TREE_MAP,
                                          is_row_zero_lambda)
from transforms.reading.names import ImportTable
from transforms.tree_uses import NO_TREE, TreeContext, used_elsewhere


class ModuleInfo:
    """The module's source and names, shared by the callers' analyses."""

    def __init__(self, source: bytes, tree: ast.Module, table: ImportTable,
                 helper_module: str | None = None, context: TreeContext = NO_TREE,
                 followed: frozenset[str] = frozenset(), refused=None):
        """`helper_module`: where the contract functions are imported from; `context`: what
        the other modules of the run tell about this one; `followed`: its steps whose calls
        in other modules are decided with this module (cross_module.py)."""
        self.source = source
        self.followed = followed
        # Steps whose callers in another module cannot go global -> why (cross_module.py)
        self.refused = refused or {}
        # Another module's steps read as sites here (cross_module.py): the mapped body's id ->
        # that module's ModuleInfo, which answers what its text and names decide
        self.homes: dict[int, ModuleInfo] = {}
        self.used_elsewhere = context.used_elsewhere
        # Functions of other modules it calls, by their imported names, whose value is known
        # (`input_pipeline._pmap_device_order()`: the devices)
        self.imported_values = context.imported_values
        self.tree = tree
        # A donating step deletes what it is given. pmap was given a fresh stack (or a copy of
        # it), never the user's value itself, so producers unstack to a fresh buffer here.
        self.donating = b"donate_argnums" in source
        self.imported = table.imported
        self.table = table
        self.line_starts = [0]
        for line in source.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.jax = next((name for name, full in table.imported.items() if full == "jax"), "jax")
        self.unreplicate_helpers = {
            s.name for s in tree.body if isinstance(s, ast.FunctionDef) and _is_unreplicate(s, self)
        }
        self._bodies: dict[str, BodyAnalysis] = {}
        self._defs: dict[str, ast.FunctionDef] | None = None
        self._calls_by_name: dict[str, list[ast.Call]] | None = None
        self.constants = string_constants(tree)
        # Module functions by name; not a def whose name a module-level statement rebinds
        # (`step = jax.pmap(step)`): a call of that name is not a call of the def.
        rebound = {t.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                   for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)
                          and s.name not in rebound}
        self.callers: set[str] = set()  # set once the callers are known
        # Callers followed inside the callers that call them, with their sites (callers.py)
        self.folded: dict[str, set[str]] = {}
        self.sites: dict = {}  # every site of the module, by key (set by the driver)
        self._sites_by_name: tuple[dict, dict[str, Site]] | None = None  # site_named's index
        self.under_other_mesh: set[str] = set()  # sites run on another axis's mesh (axes.py)
        # nested pmaps written in the global style, which callers may call (rewrite.py)
        self.nested_steps: frozenset[str] = frozenset()
        # Producer call id -> why the multi-process analysis keeps its value in pmap's layout.
        self.process_stacked: dict[int, str] = {}
        self._taken = module_names(tree)  # what a new module-level name must not shadow
        self.mesh_function = self.fresh(MESH_FUNCTION)
        self.device_rows_function = self.fresh(DEVICE_ROWS_FUNCTION)
        # The contract functions' names here: their own, or free ones where the module uses
        # theirs for something of its own. A name an earlier run imported from the helper
        # module is the function itself, kept (a second run must not import it again as `_2`).
        own = {full.rpartition(".")[2]: local for local, full in table.imported.items()
               if helper_module and full.rpartition(".")[0] == helper_module}
        self.contract_names = {name: own.get(name) or self.fresh(name) for name in DEFINED_NAMES}
        self.loads: dict[str, int] = {}
        # Every Name node by its name, in ast.walk order (loads, stores and deletes), so that
        # an analysis asking where else a name is used does not walk the module again.
        self.names: dict[str, list[ast.Name]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                self.names.setdefault(node.id, []).append(node)
                if isinstance(node.ctx, ast.Load):
                    self.loads[node.id] = self.loads.get(node.id, 0) + 1
        # A use in another module is a load no analysis here follows: a helper used there is
        # shared, and is not rewritten for this module's callers (call_kinds.py).
        for name in self._taken:
            if self.elsewhere(name) is not None:
                self.loads[name] = self.loads.get(name, 0) + 1
        self.partial = next((n for n, full in table.imported.items() if full == "functools.partial"),
                            None) or next((f"{n}.partial" for n, full in table.imported.items()
                                           if full == "functools"), None)
        self.partial = self.partial or "functools.partial"
        self.indent_unit = indent_unit(tree, source.decode("utf-8", "replace").splitlines())
        self.numpy = next((n for n, full in table.imported.items() if full == "jax.numpy"),
                          f"{self.jax}.numpy")

    def calls_of(self, name: str) -> list[ast.Call]:
        """The calls `name(...)` in the module, by the name as written."""
        if self._calls_by_name is None:
            self._calls_by_name = {}
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    self._calls_by_name.setdefault(node.func.id, []).append(node)
        return self._calls_by_name.get(name, [])

    def defaults_left_none(self, function: ast.FunctionDef) -> frozenset[str]:
        """The parameters of the module function `function` that default to None and that
        every call leaves so (`_defaults_left`)."""
        return frozenset(parameter for parameter, value in self._defaults_left(function).items()
                         if value is None)

    def defaults_left_numbers(self, function: ast.FunctionDef) -> frozenset[str]:
        """The parameters of the module function `function` whose default is a number literal
        (int, float, complex, bool) that every call leaves (`_defaults_left`): in the paths
        given they hold that number."""
        return frozenset(parameter for parameter, value in self._defaults_left(function).items()
                         if type(value) in (int, float, complex, bool))

    def _defaults_left(self, function: ast.FunctionDef) -> dict[str, object]:
        """The parameters of the module function `function` with a constant default that
        every call leaves, with that constant: it is only ever called by name here (at least
        once, never with *args or **kwargs) and no other module of the run uses it."""
        name = function.name
        if self.functions.get(name) is not function or self.elsewhere(name) is not None:
            return {}
        calls = self.calls_of(name)
        loads = [n for n in self.names.get(name, ()) if isinstance(n.ctx, ast.Load)]
        if not calls or len(loads) != len(calls):
            return {}
        return constant_defaults_left(function, calls)

    def elsewhere(self, name: str) -> str | None:
        """Where another module of the run uses the module-level `name` (`path:line`); None
        for a step whose callers there are followed (cross_module.py)."""
        if name in self.followed:
            return None
        return used_elsewhere(self.used_elsewhere, name)

    def site_named(self, name: str) -> Site | None:
        """The first site of `sites` called by `name` (not a class's, not built on the spot)."""
        if self._sites_by_name is None or self._sites_by_name[0] is not self.sites:
            by_name: dict[str, Site] = {}
            for site in self.sites.values():
                if not site.holder and not site.inline:
                    by_name.setdefault(site.name, site)
            self._sites_by_name = (self.sites, by_name)
        return self._sites_by_name[1].get(name)

    def fresh(self, name: str) -> str:
        return fresh_name(name, self._taken)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.line_starts[node.lineno - 1] + node.col_offset,
                self.line_starts[node.end_lineno - 1] + node.end_col_offset)

    def render(self, start: int, end: int, edits: dict[tuple[int, int], str]) -> str:
        """Source bytes start:end with the outermost edits inside applied."""
        out, position = [], start
        inside = [k for k in edits if start <= k[0] and k[1] <= end and k != (start, end)]
        for (a, b) in sorted(inside, key=lambda k: (k[0], -k[1])):
            if a < position:
                continue  # inside an edit already applied
            out.append(self.source[position:a].decode("utf-8"))
            out.append(edits[(a, b)])
            position = b
        if (start, end) in edits:
            return edits[(start, end)]
        out.append(self.source[position:end].decode("utf-8"))
        return "".join(out)

    def body_analysis(self, site: Site) -> BodyAnalysis:
        if site.key not in self._bodies:
            if self._defs is None:  # every def (self.functions leaves out rebound names)
                self._defs = {s.name: s for s in self.tree.body if isinstance(s, ast.FunctionDef)}
            self._bodies[site.key] = BodyAnalysis(site, self.tree, self.imported, self.constants,
                                                  self._defs)
        return self._bodies[site.key]

    def starts_a_line(self, body) -> bool:
        """The body's first statement (after a docstring) begins its own line, so a statement
        can be put before it."""
        if id(body) in self.homes:
            return self.homes[id(body)].starts_a_line(body)
        if not isinstance(body, ast.FunctionDef):
            return False
        first = first_body_statement(body)
        line = statement_line(first)
        line_start = self.line_starts[line - 1]
        return not self.source[line_start:line_start + first.col_offset].strip()

    def statement_start(self, statement: ast.stmt) -> int:
        """Where `statement` begins: its first decorator's line for a decorated def or class
        (ast puts a def's own position at `def`)."""
        return self.line_starts[statement_line(statement) - 1] + statement.col_offset

    def can_stack_results(self, site: Site) -> bool:
        """Per-device results keep their device axis by an expand at the body's returns;
        that edit is only made in a body no other code uses."""
        if id(site.body) in self.homes:
            return self.homes[id(site.body)].can_stack_results(site)
        if site.decorated or isinstance(site.body, ast.Lambda) or site.rebinds is site.body:
            return True  # (a rebound def's name, read anywhere, is the site's)
        return self.loads.get(site.body.name, 0) == 1


def _is_unreplicate(function: ast.FunctionDef, module: ModuleInfo) -> bool:
    """`def unreplicate(tree): return jax.tree.map(lambda x: x[0], tree)`."""
    if len(function.args.args) != 1 or len(function.body) != 1 or function.decorator_list:
        return False
    statement = function.body[0]
    if not (isinstance(statement, ast.Return) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    return (dotted(call.func, module.imported) in TREE_MAP and len(call.args) == 2
            and isinstance(call.args[0], ast.Lambda) and is_row_zero_lambda(call.args[0])
            and isinstance(call.args[1], ast.Name) and call.args[1].id == function.args.args[0].arg)


def first_body_statement(function: ast.FunctionDef) -> ast.stmt:
    """The statement a squeeze goes before: the first one after a docstring."""
    statements = function.body
    docstring = isinstance(statements[0], ast.Expr) and isinstance(
        statements[0].value, ast.Constant) and isinstance(statements[0].value.value, str)
    return statements[1] if docstring and len(statements) > 1 else statements[0]


def statement_line(statement: ast.stmt) -> int:
    """The line `statement` begins on, its decorators included."""
    decorators = getattr(statement, "decorator_list", None)
    return min([statement.lineno, *(d.lineno for d in decorators)]) if decorators \
        else statement.lineno


def own_returns(function: ast.FunctionDef):
    """The function's return statements, not those of functions nested in it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
