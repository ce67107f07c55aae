"""Reads of a donated value after the call: the one donation difference the global style
cannot mimic.

pmap copies a donated argument that is not laid out for it (a `jnp.stack([w] * n)` lives on
one device, a reshaped batch on one device or on the host) and deletes only its copy, so the
value itself survives the call. The migrated step is a jit, which deletes exactly the array
it is given, and under the mesh every producer the migration can write (`jnp.asarray`,
`device_put(x, P())`) lands on the mesh and is deleted too. So a read of such a value after
the donating call differs: `is_deleted()` gives True where the original gives False, and any
other use raises "Array has been deleted" where the original computed.

Safe, because pmap deletes them as well or because nothing deletes them: a step's own
results, `device_put_replicated` / flax `replicate` / `device_put_sharded` placements (and
module helpers that only return one), numpy arrays, and Python numbers, which are no device
buffer at all (donation_numbers.py states which expressions are). Every other value is
"unsafe" and gets a token; the walk below follows, flow-sensitively, which names (and aliases: `old = params`,
`old["w"]`, tuple unpacking, containers, calls that may hand an argument back) may hold which
tokens. A donating call deletes a value in the names that hold it when it runs (they hold its
token in a deleted form from then on), so where paths join, one on which no step ran (a loop
that may run no trip) keeps its names' values live rather than meeting the other path's
deletions. Loops run to a fixpoint, so a
value donated on one iteration and read on the next is seen.

One read is allowed: `d = old.is_deleted()` (or `np.asarray` / `bool` of it) as a top-level
statement of a `for _ in range(K)` loop with a constant K >= 2, where `d` is read nowhere in
the loop and the loop cannot end early. Only the last iteration's `d` survives; the first
iteration is analysed apart (peeled), so the read is allowed only if it is safe from the
second iteration on, that is on the last one (pmap's own results are deleted in both).
Anything else found raises a PM610 `Blocker` naming the read's line, and the caller falls back.

The statement walk is interpreter.py's; this module supplies what each statement does and
its loop and try policies. What an expression's value may hold, and how assignments bind it,
is the base class in donation_values.py.
"""

from __future__ import annotations

import ast

from transforms.codes.global_view import DONATED_COPY_READ
from transforms.global_view.donation_numbers import module_constants
from transforms.global_view.donation_values import (
    DonatedValues,
    State,
    Token,
    free_names,
    live,
    short,
)
from transforms.global_view.interpreter import Jumps, StatementInterpreter
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import AS_ARRAY, TO_SCALAR

LIMIT = 50  # fixpoint rounds of one loop (the sets only grow, so it settles far sooner)


class DonatedReads(DonatedValues, StatementInterpreter):
    """One caller of global sites: `site_calls` are its calls of sites (by node id),
    `produced` the producers the caller analysis recognised (node id -> qualified name).

    Its policies in interpreter.py's walk: the first loop iteration peeled, later ones to a
    fixpoint of at most LIMIT rounds, break / continue states tracked, and a try's handlers
    (and finally) from every state its body reached; `guarded` tells `_overwritten_reads`
    it is inside a try or with."""

    loop_rounds = LIMIT
    peel_first_iteration = True
    tracks_jumps = True
    handlers_from_any_raise = True

    def __init__(self, function: ast.FunctionDef, site_calls: dict[int, Site],
                 produced: dict[int, str], module, qualify, lowerings=frozenset()):
        """`lowerings`: the ids of `site.lower(...)` calls (they read, never donate)."""
        self.function = function
        self.site_calls = site_calls
        self.lowerings = lowerings
        self.produced = produced
        self.module = module
        self.qualify = qualify
        self.local, self.escaping, self.introspects = scope_of(function)
        parameters = parameters_of(function)
        numbers = module.defaults_left_numbers(function)  # hold a number: no array
        self.state = State({p: frozenset() if p in numbers else frozenset({("parameter", p)})
                            for p in parameters}, frozenset())
        self.origin: dict[Token, ast.AST] = {}
        self.donors: dict[Token, tuple[ast.Call, Site]] = {}
        self.loops: list[Jumps] = []
        self.guarded = 0  # inside try / with: an exception may skip a loop's later iterations
        self.tolerated: set[int] = set()  # statements whose is_deleted() may see a deleted value
        self.collectors: list[list[State]] = []  # the states an active try's handlers may see
        self.held: dict[str, set] = {}  # every token a name ever held (closures, globals)
        self.closures: list[tuple[ast.AST, set[str]]] = []

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> None:
        self._block(self.function.body)
        for node, names in self.closures:  # a closure may read its names at any later time
            for name in sorted(names):
                self._closed_over(node, name)
        for name in sorted(self.escaping):
            self._closed_over(self.function, name)

    def _closed_over(self, node, name) -> None:
        held = self.held.get(name, set())
        hit = {live(t) for t in self.state.donated
               if live(t) in held or ("node", live(t)[1]) in held}
        if hit:
            raise Blocker(DONATED_COPY_READ, node, f"`{name}` may hold {self._what(hit)}, which "
                          f"{self._donor(hit)}; it is visible outside this function's own "
                          "statements (a closure, global or nonlocal), so a later read cannot "
                          "be ruled out")

    # -- messages -------------------------------------------------------------------------
    def _named(self, tokens) -> Token:
        """The token a message names: a recognised producer's, else the latest value's."""
        return max(tokens, key=lambda t: (self.origin.get(t) is not None
                                          and id(self.origin[t]) in self.produced, self._line(t)))

    def _what(self, tokens) -> str:
        token = self._named(tokens)
        kind, value = token
        if kind == "parameter":
            return f"the parameter `{value}` (its producer is not in sight)"
        if kind == "global":
            return f"the module-level `{value}`"
        node = self.origin[token]
        text = ast.unparse(node)
        text = text if len(text) <= 50 else text[:47] + "..."
        return f"the value of `{text}` (line {node.lineno})"

    def _donor(self, tokens) -> str:
        call, site = self.donors[self._named(tokens)]
        return f"{site.label} donates at line {call.lineno}"

    def _line(self, token) -> int:
        node = self.origin.get(token)
        return getattr(node, "lineno", 0)

    def _deleted_read(self, read: ast.AST, tokens, raises: bool) -> Blocker:
        tokens = {live(t) for t in tokens}
        effect = ("the read raises `Array has been deleted` where the original computes" if raises
                  else "`is_deleted()` gives True where the original gives False")
        return Blocker(DONATED_COPY_READ, read,
                       f"`{short(read)}` is read after {self._donor(tokens)} and "
                       f"may hold {self._what(tokens)}: pmap donated a copy of that value (not "
                       f"laid out for pmap), so the original keeps it, but the migrated jit "
                       f"deletes it, and {effect}")

    # -- the hooks of the shared walk (interpreter.py) -------------------------------------
    def _snapshot(self) -> State:
        return self.state

    def _restore(self, state: State) -> None:
        self.state = state

    def _join_states(self, a: State, b: State, node) -> State:
        """Unions, so the order of the two paths does not matter (an if's join was
        `orelse.join(body)` before the shared walk, now `body.join(orelse)`)."""
        return a.join(b)

    def _unsettled(self, s) -> Blocker:
        return Blocker(DONATED_COPY_READ, s, "the values donated in this loop do not settle")

    def _assign_statement(self, s) -> None:
        if s.value is None:
            return
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        elements = None  # `a, b = x, y`: element by element
        if isinstance(s.value, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in s.value.elts):
            elements = [self._eval_alias(e) for e in s.value.elts]
            tokens = frozenset().union(*elements)
        elif isinstance(s.value, ast.Call) and len(targets) == 1 \
                and isinstance(targets[0], ast.Tuple) \
                and all(isinstance(t, ast.Name) for t in targets[0].elts) \
                and self.qualify(s.value.func).startswith("jax.random."):
            # `rng, init_rng = jax.random.split(rng)`: new keys, none an alias of another
            self._value(s.value, statement=s)
            elements = [frozenset({self._token(t)}) for t in targets[0].elts]
            tokens = frozenset().union(*elements)
        else:
            tokens = self._value(s.value, statement=s)
        for target in targets:
            self._bind(target, tokens, elements)

    def _aug_assign_statement(self, s) -> None:
        tokens = self._eval(s.value)
        if isinstance(s.target, ast.Name):
            tokens |= self._read(s.target, s.target.id)
        else:
            tokens |= self._eval(s.target)
        self._bind(s.target, tokens | {self._token(s)})

    def _expression_statement(self, value) -> None:
        self._eval(value)

    def _test(self, node) -> None:
        self._eval(node)

    def _loop_head(self, s):
        """The iterable is evaluated once, before the loop; each iteration binds the target
        to what it may hold. A while's head is its test."""
        if isinstance(s, ast.While):
            return lambda: self._eval(s.test)
        tokens = self._eval(s.iter)
        if isinstance(s.iter, ast.Call) and self.builtin(s.iter.func) == "range":
            tokens = frozenset()  # numbers
        return lambda: self._bind(s.target, tokens)

    def _with_item(self, item: ast.withitem) -> None:
        tokens = self._eval(item.context_expr)
        if item.optional_vars is not None:
            self._bind(item.optional_vars, tokens)

    def _handler_entry(self, handler: ast.ExceptHandler) -> None:
        if handler.type is not None:
            self._eval(handler.type)
        if handler.name:
            self._set(handler.name, frozenset())

    def _return_statement(self, s: ast.Return) -> None:
        if s.value is not None:
            self._eval(s.value)

    def _delete_statement(self, s: ast.Delete) -> None:
        for target in s.targets:
            if isinstance(target, ast.Name):
                self._set(target.id, frozenset())
            else:
                self._eval(target)

    def _definition(self, s) -> None:
        self.closures.append((s, free_names(s)))
        self._set(s.name, frozenset())

    def _unmodelled(self, s) -> None:
        if isinstance(s, (ast.Global, ast.Nonlocal)):
            return
        if isinstance(s, (ast.Raise, ast.Assert)):
            for child in ast.iter_child_nodes(s):
                self._eval(child)
            return
        raise Blocker(DONATED_COPY_READ, s,
                      f"a {type(s).__name__} statement in a function whose step "
                      "donates: the check of reads after the donating call does not follow it")

    def _first_iteration(self, s, head) -> Jumps:
        """Peeled: its allowed reads are those a later iteration overwrites."""
        outer, self.tolerated = self.tolerated, self.tolerated | self._overwritten_reads(s)
        first = self._iteration(s, head)
        self.tolerated = outer
        return first

    def _loop_exit(self, s, entry: State, start: State) -> None:
        """From the settled state, or from the entry state too when it may not run at all;
        a while runs the test that ends it."""
        runs_once = isinstance(s, ast.For) and self._trip_count(s) >= 1
        self.state = start if runs_once else start.join(entry)
        if isinstance(s, ast.While):
            self._eval(s.test)  # the test that ends it

    def _overwritten_reads(self, s) -> set[int]:
        """The top-level `d = old.is_deleted()` statements of a loop that runs at least twice
        and cannot end early, whose `d` nothing reads before the next iteration overwrites
        it: only the last iteration's read can be observed."""
        if not isinstance(s, ast.For) or self.guarded or self.introspects \
                or self._trip_count(s) < 2 or ends_early(s):
            return set()
        loaded = {n.id for statement in s.body for n in ast.walk(statement)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bound = {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}
        found = set()
        for statement in s.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) \
                    and self._is_deleted_read(statement.value) is not None:
                name = statement.targets[0].id
                if name not in loaded and name not in bound and name not in self.escaping:
                    found.add(id(statement))
        return found

    def _is_deleted_read(self, node) -> ast.AST | None:
        """The alias path of `path.is_deleted()`, or of `np.asarray` / `bool` ... of it."""
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and (
                self.qualify(node.func) in AS_ARRAY | TO_SCALAR
                or (isinstance(node.func, ast.Name) and node.func.id in ("bool", "int", "float")
                    and node.func.id not in self.module.table.bound_otherwise)):
            node = node.args[0]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "is_deleted" and not node.args and not node.keywords \
                and self._alias_key(node.func.value) is not None:
            return node.func.value
        return None

    def _trip_count(self, s: ast.For) -> int:
        """K of `for _ in range(K)` (or range(a, b)) with constant bounds; 0 if unknown."""
        call = s.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "range" and "range" not in self.module.table.bound_otherwise
                and "range" not in self.local and not call.keywords and 1 <= len(call.args) <= 2):
            return 0
        bounds = [self._constant_int(a) for a in call.args]
        if any(b is None for b in bounds):
            return 0
        return bounds[0] if len(bounds) == 1 else bounds[1] - bounds[0]

    def _constant_int(self, node) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id not in self.local:
            return _module_ints(self.module.tree).get(node.id)
        return None


def check_donated_reads(analysis) -> None:
    """Raise a PM610 Blocker if the caller `analysis` (dataflow.CallerAnalysis, after its
    walk) reads a value pmap donated a copy of, after the donating call."""
    if not any(site.donate for site in analysis.site_calls.values()):
        return
    DonatedReads(analysis.function, analysis.site_calls, analysis.produced, analysis.module,
                 analysis.qualified, frozenset(analysis.lowerings)).run()


def parameters_of(function: ast.FunctionDef) -> list[str]:
    arguments = function.args
    return [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                            arguments.vararg, arguments.kwarg] if a is not None]


def scope_of(function: ast.FunctionDef) -> tuple[set[str], set[str], bool]:
    """A function's local names (its stores and parameters), the names it declares global or
    nonlocal, and whether it calls `locals` / `vars` / `exec` / `eval`."""
    local = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del))} | set(parameters_of(function))
    escaping = {name for n in ast.walk(function)
                if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    introspects = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                      and n.func.id in ("locals", "vars", "exec", "eval")
                      for n in ast.walk(function))
    return local, escaping, introspects


def ends_early(loop: ast.For) -> bool:
    """A break or continue of this loop, or a return or yield anywhere in its body."""
    def walk(nodes, own: bool):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
                return True
            if own and isinstance(node, (ast.Break, ast.Continue)):
                return True
            inner = own and not isinstance(node, (ast.For, ast.While, ast.AsyncFor))
            if walk(ast.iter_child_nodes(node), inner):
                return True
        return False
    return walk(loop.body, True)


def _module_ints(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound once, to an int literal, and never rebound."""
    return {name: value for name, value in module_constants(tree).items() if type(value) is int}


