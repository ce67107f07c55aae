"""Which values of a multi-process program can differ from one process to the next.

`--style global` places a value replicated in the original once, with `jax.device_put(x, P())`,
which is exact only when every process places the same value; and a step must be called on
every process, or its collectives and placements wait for ever. Both are decided here, from the
standard `ast`, on the safe side: a value is process-dependent when it reads
`jax.process_index()` / `jax.host_id()`, a device's `process_index`, a clock, the global numpy
or stdlib random state, the environment, a parameter of its function (unseen callers give it),
or a module function or module name that does; and so is anything computed from such a value
(flow-insensitive, to a fixpoint). Draws from a `RandomState` / `Generator` made with a fixed
seed are the same everywhere.

Code under a process-dependent condition may run on some processes only. There a step runs as
pmap ran it: its collectives wait for the other processes exactly where pmap's did, and a step
without collectives waits for nothing, in both programs. What the global style must not add
there is a wait of its own: `jax.device_put(host_value, P())` checks that every process placed
the same value (`multihost_utils.assert_equal`), so it waits for all of them. A condition that
tells processes apart by their index (`if jax.process_index() == 0:`) is told from one that can
differ only by accident (a parameter, a clock): a step with collectives under the first cannot
run on more than one process, in the original either, and is reported.
"""

from __future__ import annotations

import ast

from transforms.global_view.sites import dotted

# Values that can differ from one process to the next.
PROCESS_DEPENDENT = {"jax.process_index", "jax.host_id", "os.getpid", "os.environ", "os.getenv"}
PROCESS_DEPENDENT_PREFIXES = ("time.", "random.", "uuid.", "secrets.", "datetime.")
PROCESS_ATTRIBUTES = {"process_index", "host_id"}  # a device's own process
PROCESS_IDENTITY = {"jax.process_index", "jax.host_id"}
# numpy.random functions that read or seed the global random state (draws from a
# RandomState / Generator made with a fixed seed are the same on every process).
NUMPY_RANDOM = "numpy.random."
NUMPY_RANDOM_CONSTRUCTORS = {"RandomState", "default_rng", "Generator", "PCG64", "MT19937",
                             "SeedSequence", "Philox", "SFC64", "BitGenerator"}
class ProcessDependence:
    """Which module functions and names can hold a value that differs between processes.
    `identity`: only those computed from a process's index (`jax.process_index()`, a device's
    `process_index`), the values that tell processes apart on purpose."""

    def __init__(self, tree: ast.Module, imported: dict[str, str], identity: bool = False):
        self.imported = imported
        self.identity_only = identity
        self._tainted_by_function: dict[int, set[str]] = {}
        self.identity = None if identity else ProcessDependence(tree, imported, identity=True)
        self.definitions = {s.name: s for s in tree.body
                            if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
        self.functions: set[str] = set()
        self.globals: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, definition in self.definitions.items():
                if name not in self.functions and any(
                        self._source(n, set()) for n in ast.walk(definition)):
                    self.functions.add(name)
                    changed = True
            for statement in tree.body:
                if not isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                    found = _tainted_targets(statement, lambda e: self.depends(e, set()))
                    if found - self.globals:
                        self.globals |= found
                        changed = True

    def _source(self, node: ast.AST, local: set[str]) -> bool:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            sources = PROCESS_IDENTITY if self.identity_only else PROCESS_DEPENDENT
            return node.id in local or (node.id in self.globals and node.id not in local) or \
                node.id in self.functions or dotted(node, self.imported) in sources
        if isinstance(node, ast.Attribute):
            if node.attr in PROCESS_ATTRIBUTES:
                return True
            name = dotted(node, self.imported)
            if self.identity_only:
                return name in PROCESS_IDENTITY
            if name in PROCESS_DEPENDENT or name.startswith(PROCESS_DEPENDENT_PREFIXES):
                return True
            if name.startswith(NUMPY_RANDOM) and name[len(NUMPY_RANDOM):].split(".")[0] \
                    not in NUMPY_RANDOM_CONSTRUCTORS:
                return True
        return False

    def depends(self, node: ast.AST, local: set[str]) -> bool:
        """Whether the expression can evaluate differently on two processes."""
        return any(self._source(n, local) for n in ast.walk(node))

    def tainted_names(self, function: ast.FunctionDef, steps=frozenset()) -> set[str]:
        """The function's local names that can differ between processes (flow-insensitive,
        to a fixpoint); its parameters count, since unseen callers give them. Results of the
        global steps (`steps`: ids of their calls) are left to the caller analysis: their
        replicated results are the same everywhere, the others are per-device kinds. With
        `identity`, parameters do not count: a caller's value tells processes apart only if
        it was computed from a process index, which this module's callers are checked for."""
        tainted = set() if self.identity_only else {
            a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        changed = True
        while changed:
            changed = False
            for node in ast.walk(function):
                if node is function:
                    continue
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    found = {node.name} if self.depends(node, tainted) else set()
                elif isinstance(node, ast.Assign) and id(node.value) in steps:
                    continue
                elif isinstance(node, ast.stmt):
                    found = _tainted_targets(node, lambda e, t=tainted: self.depends(e, t))
                else:
                    continue
                if found - tainted:
                    tainted |= found
                    changed = True
        return tainted


    def conditional_nodes(self, function: ast.FunctionDef, tainted: set[str]) -> dict[int, ast.AST]:
        """id of each node in `function` that runs only where a process-dependent condition
        holds, or a process-dependent number of times -> that condition: the branches of
        `if`, `while` and `a if c else b`, the rest of `c and f()`, the body of a loop over a
        process-dependent iterable (its iterable stands for the condition), and what follows
        `if c: return` (or `raise`, `break`, `continue`) in the same block."""
        found: dict[int, ast.AST] = {}

        def under(condition, parts):
            for part in parts:
                for node in ast.walk(part):
                    found.setdefault(id(node), condition)

        def listed(part):
            return part if isinstance(part, list) else [part]

        for node in ast.walk(function):
            if isinstance(node, (ast.If, ast.While, ast.IfExp)) and self.depends(node.test, tainted):
                under(node.test, [*listed(node.body), *listed(node.orelse)])
            elif isinstance(node, (ast.For, ast.AsyncFor)) and self.depends(node.iter, tainted):
                under(node.iter, [*node.body, *node.orelse])
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                for index, generator in enumerate(node.generators):
                    tests = [generator.iter, *generator.ifs]
                    condition = next((t for t in tests if self.depends(t, tainted)), None)
                    if condition is not None:
                        rest = [g for g in node.generators[index + 1:]]
                        under(condition, [*generator.ifs, *rest, *(
                            [node.key, node.value] if isinstance(node, ast.DictComp)
                            else [node.elt])])
                        break
            elif isinstance(node, ast.BoolOp):
                for index, value in enumerate(node.values[:-1]):
                    if self.depends(value, tainted):
                        under(value, node.values[index + 1:])
                        break
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for index, statement in enumerate(block):
                    if isinstance(statement, ast.If) and self.depends(statement.test, tainted) \
                            and _exits(statement):
                        under(statement.test, block[index + 1:])
                        break
        return found

    def tells_apart(self, condition: ast.AST, function: ast.FunctionDef) -> bool:
        """Whether `condition`, in `function`, reads a process's index: it holds on some
        processes by design, not by accident. A loop's iterable is never such a condition:
        each process iterating over its own rows is the usual multi-process program, and
        only the number of rows decides how often the body runs."""
        if any(isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension))
               and node.iter is condition for node in ast.walk(function)):
            return False
        identity = self.identity or self
        if id(function) not in identity._tainted_by_function:  # a fixpoint: once per function
            identity._tainted_by_function[id(function)] = identity.tainted_names(function)
        return identity.depends(condition, identity._tainted_by_function[id(function)])

    def sometimes_called(self) -> dict[str, tuple[ast.AST, bool]]:
        """Module functions some process may not call (called under a process-dependent
        condition, or from such a function) -> (the condition, whether it tells processes
        apart by their index: `tells_apart`). Of several, one that tells them apart wins."""
        found: dict[str, tuple[ast.AST, bool]] = {}
        functions = {n: d for n, d in self.definitions.items() if isinstance(d, ast.FunctionDef)}
        calls = {}
        for name, function in functions.items():
            conditional = self.conditional_nodes(function, self.tainted_names(function))
            calls[name] = [(n, conditional.get(id(n)), function) for n in ast.walk(function)
                           if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                           and n.func.id in functions]
        changed = True
        while changed:
            changed = False
            for name, listed in calls.items():
                for call, condition, function in listed:
                    reason = (condition, self.tells_apart(condition, function)) \
                        if condition is not None else found.get(name)
                    known = found.get(call.func.id)
                    if reason is not None and (known is None or reason[1] and not known[1]):
                        found[call.func.id] = reason
                        changed = True
        return found


def _tainted_targets(statement: ast.stmt, depends) -> set[str]:
    """Names a statement binds (or mutates) from a process-dependent value."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = statement.value
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if value is not None and (depends(value) or (
                isinstance(statement, ast.AugAssign) and depends(statement.target))):
            return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        # `x[i] = v` / `x.a = v` with a dependent index: x changes per process.
        return {_base(t) for t in targets if isinstance(t, (ast.Subscript, ast.Attribute))
                and depends(t)} - {None}
    if isinstance(statement, (ast.For, ast.AsyncFor)) and depends(statement.iter):
        return {n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)}
    if isinstance(statement, ast.With):
        return {n.id for item in statement.items if item.optional_vars is not None
                and depends(item.context_expr)
                for n in ast.walk(item.optional_vars) if isinstance(n, ast.Name)}
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and depends(statement.value):
        return {_base(statement.value.func.value)} - {None}  # rng.shuffle(x), xs.append(v)
    return set()


def _exits(statement: ast.If) -> bool:
    """Whether a branch of the `if` leaves its block: return, raise, break or continue
    (outside the functions and classes it defines)."""
    stack = [*statement.body, *statement.orelse]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _base(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
