"""The value half of the donated-read check (donation.py): which tokens an expression's value
may hold, checking every read on the way, and how assignments bind them.

`DonatedValues` is the base of `DonatedReads`, which walks the statements and owns the state
read here: `state` (names -> tokens, and the tokens a step may have deleted), `local`,
`module`, `qualify`, `site_calls`, `produced`, `held`, `closures`, `tolerated`, `origin`,
`donors`; and `_deleted_read`, `_is_deleted_read` and `_what`, which this half calls.
"""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import DONATED_COPY_READ
from transforms.global_view.callers import MODULE_CALLER
from transforms.global_view.donation_numbers import (
    NUMBER_TYPES,
    is_number,
    module_constants,
    number_names,
)
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import DEVICE_COUNT, DEVICES, REPLICATE, TO_SCALAR, TREE_MAP

SAFE_PRODUCERS = REPLICATE | {"jax.device_put_sharded"}  # pmap's own layout: pmap deletes them too
# Host values (numbers, device lists) that no step can delete.
HOST_RESULTS = TO_SCALAR | DEVICE_COUNT | DEVICES | {
    "jax.device_get", "builtins.len", "builtins.isinstance", "jax.process_index",
    "jax.process_count", "jax.host_id", "jax.host_count"}
SCALAR_BUILTINS = {"float", "int", "bool", "len", "isinstance", "str"}
# Functions that store none of their arguments into another one (a call `f(a, b)` of anything
# else may leave `b` inside `a`): their results may still hold their arguments.
KEEPS_NOTHING_PREFIXES = ("jax.random.", "jax.numpy.", "numpy.", "os.path.", "logging.",
                          "absl.logging.", "math.")
KEEPS_NOTHING = {"functools.partial", "jax.jit", "jax.pmap", "jax.vmap", "jax.grad",
                 "jax.value_and_grad"}
KEEPS_NOTHING_BUILTINS = {"max", "min", "dict", "list", "tuple", "zip", "enumerate", "range",
                          "iter", "next", "sorted", "print", "abs", "round", "sum", "any", "all",
                          "len", "int", "float", "bool", "str", "isinstance", "repr", "reversed"}
# numpy's random generators: every draw from one is a new host array.
NUMPY_GENERATORS = {"numpy.random.RandomState", "numpy.random.default_rng",
                    "numpy.random.Generator"}
Token = tuple  # ("node", id) | ("parameter", name) | ("global", name) | ("deleted", token)


def deleted(token: Token) -> Token:
    """The form a name holds `token` in once a step has deleted it (`_delete`)."""
    return ("deleted", token)


def live(token: Token) -> Token:
    """The token itself, of a deleted form or not (what messages and `donors` name)."""
    return token[1] if token[0] == "deleted" else token


@dataclasses.dataclass(frozen=True)
class State:
    names: dict  # name -> frozenset of tokens it may hold
    # The deleted forms (`deleted(token)`) of the tokens a donating call may have deleted.
    # Deletion is marked in the names that held the value when the step ran, so a path on
    # which no step ran (a loop that may run no trip) keeps its names' values live.
    donated: frozenset

    def join(self, other: State | None) -> State:
        if other is None:
            return self
        names = {n: self.names.get(n, frozenset()) | other.names.get(n, frozenset())
                 for n in {*self.names, *other.names}}
        return State(names, self.donated | other.donated)


class DonatedValues:
    """Expressions and bindings of `DonatedReads` (donation.py)."""

    # -- bindings -------------------------------------------------------------------------
    def _set(self, name: str, tokens: frozenset) -> None:
        self.state = State({**self.state.names, name: frozenset(tokens)}, self.state.donated)
        self.held.setdefault(name, set()).update(tokens)

    def _bind(self, target, tokens: frozenset, elements: list | None = None) -> None:
        """`elements`: the tokens of a tuple or list literal's elements, one by one."""
        if isinstance(target, ast.Name):
            self._set(target.id, tokens)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if elements is not None and len(elements) == len(target.elts) \
                    and not any(isinstance(e, ast.Starred) for e in target.elts):
                for element_target, element in zip(target.elts, elements):
                    self._bind(element_target, element)
            else:  # unpacking a tuple output or a container: any element may hold any part
                for element_target in target.elts:
                    self._bind(element_target, tokens)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, tokens)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            # A store into a container or object: what it held, it may still hold, plus this.
            root = self._root_key(target)
            if isinstance(target, ast.Subscript):
                self._eval(target.slice)
            if root is not None:
                self._set(root, self._names(root) | tokens)
            else:
                self._eval(target.value)

    def _names(self, name: str) -> frozenset:
        if name in self._step_names():
            return frozenset()  # a step (`p_eval_step` handed to a helper): not an array
        if name in self.state.names:
            return self.state.names[name]
        if name in self.local:
            return frozenset()  # not bound on this path yet
        if name in self.module.imported or name in self.module.functions or any(
                isinstance(s, ast.ClassDef) and s.name == name for s in self.module.tree.body):
            return frozenset()  # a module, function or class, not an array
        if type(self._module_constants().get(name)) in NUMBER_TYPES:
            return frozenset()  # a module-level number (donation_numbers.py)
        return frozenset({("global", name)})

    # -- expressions ----------------------------------------------------------------------
    def _value(self, node, statement) -> frozenset:
        """The right-hand side of an assignment: an alias path binds without reading."""
        if id(statement) in self.tolerated:
            path = self._is_deleted_read(node)
            self._eval_alias(path)  # the read itself: allowed, overwritten later
            return frozenset()
        return self._eval_alias(node)

    def _eval_alias(self, node) -> frozenset:
        key = self._alias_key(node)
        return self._names(key) if key is not None else self._eval(node)

    def _alias_key(self, node) -> str | None:
        """The name an alias path (`old`, `old["w"]`) starts from; None for other values."""
        if alias_path(node):
            for part in ast.walk(node):
                if isinstance(part, ast.Name):
                    return part.id
        return None

    def _root_key(self, node) -> str | None:
        """The name whose value a store into `node` (`d["k"] = ...`, `obj.x = ...`) changes."""
        return _root_name(node)

    def _eval(self, node) -> frozenset:
        """The tokens `node`'s value may hold (alias), checking every read on the way."""
        if node is None or isinstance(node, ast.Constant):
            return frozenset()
        if isinstance(node, ast.Name):
            return self._read(node, node.id)
        if isinstance(node, ast.Call):
            tokens = self._call(node)
            return frozenset() if self._is_number(node) else tokens
        if isinstance(node, (ast.Attribute, ast.Starred)):
            return self._eval(node.value)
        if isinstance(node, ast.Subscript):
            self._eval(node.slice)
            return self._eval(node.value)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return frozenset().union(*(self._eval(e) for e in node.elts))
        if isinstance(node, ast.Dict):
            return frozenset().union(*(self._eval(e) for e in [*node.keys, *node.values]))
        if isinstance(node, ast.NamedExpr):
            tokens = self._eval(node.value)
            self._set(node.target.id, tokens)
            return tokens
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self._comprehension(node)
        if isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                self._eval(default)
            names = free_names(node)
            tokens = frozenset().union(*(self._names(n) for n in names))
            hit = tokens & self.state.donated
            if hit:
                raise self._deleted_read(node, hit, raises=True)
            self.closures.append((node, names))
            return tokens
        if isinstance(node, (ast.Compare, ast.JoinedStr)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._eval(child)
            return frozenset()
        # arithmetic and the rest: new, or an operand; a number holds none (its operands are
        # still read)
        number = self._is_number(node)
        tokens = frozenset() if number else frozenset({self._token(node)})
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                operand = self._eval(child)
                tokens = tokens if number else tokens | operand
        return tokens

    def _read(self, node, name: str) -> frozenset:
        tokens = self._names(name)
        hit = tokens & self.state.donated
        if hit:
            raise self._deleted_read(node, hit, raises=True)
        return tokens

    def _comprehension(self, node) -> frozenset:
        """Its body runs once per element: passes until no more values are donated, so a value
        one pass donates (`[step(w, x) for x in xs]`) is read by the next."""
        saved, before = self.state.names, self.state.donated
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        tokens = frozenset({self._token(node)})
        outer = self._eval(node.generators[0].iter)  # evaluated once, before the first element
        for _ in range(4):
            donated = self.state.donated
            for index, generator in enumerate(node.generators):
                self._bind(generator.target, self._eval(generator.iter) if index else outer)
                for condition in generator.ifs:
                    self._eval(condition)
            tokens = tokens.union(*(self._eval(p) for p in parts))
            if self.state.donated == donated:
                break
        # its own names go; what a step deleted in it, the names outside hold deleted too
        deleted_here = frozenset(live(t) for t in self.state.donated - before)
        self.state = State(delete_in(saved, deleted_here), self.state.donated)
        return tokens

    def _call(self, call: ast.Call) -> frozenset:
        path = self._is_deleted_read(call) if is_method(call, "is_deleted") else None
        if path is not None:
            hit = self._eval_alias(path) & self.state.donated
            if hit:
                raise self._deleted_read(call, hit, raises=False)
            return frozenset()
        site = self.site_calls.get(id(call))
        if site is not None:
            return self._site_call(call, site)
        if id(call) in self.lowerings:  # `site.lower(...)`: reads its arguments, keeps none
            for argument in call.args:
                self._eval(argument)
            return frozenset()
        name = self.qualify(call.func)
        receiver = frozenset()
        if isinstance(call.func, ast.Attribute):
            receiver = self._eval(call.func.value)
        elif not isinstance(call.func, ast.Name):
            receiver = self._eval(call.func)
        arguments = [*call.args, *(k.value for k in call.keywords)]
        passed = frozenset().union(*(self._eval(a) for a in arguments))
        if id(call) in self.produced:
            return self._produced(call, self.produced[id(call)], passed | receiver)
        builtin = isinstance(call.func, ast.Name) and call.func.id in SCALAR_BUILTINS \
            and call.func.id not in self.module.table.bound_otherwise
        if name.startswith("numpy.") and isinstance(call.func, ast.Attribute) \
                or name in HOST_RESULTS or builtin or self._host_arrays(call, name):
            return frozenset()  # a numpy array or a host scalar: never deleted
        if isinstance(call.func, ast.Name) and self._returns_safe(call.func.id):
            return frozenset()
        if name.startswith(KEEPS_NOTHING_PREFIXES) or name in KEEPS_NOTHING \
                or self.builtin(call.func) in KEEPS_NOTHING_BUILTINS \
                or self._helper_keeps_nothing(call):
            # keeps none of its arguments in another (its result may hold them)
            return frozenset({self._token(call)}) | passed | receiver
        # Anything else may keep what it is given (`losses.append(x)`, `store(d, x)`) and
        # may give it back.
        for holder in [call.func.value if isinstance(call.func, ast.Attribute) else None,
                       *arguments]:
            root = self._root_key(holder) if holder is not None else None
            if root in self._number_names():
                continue  # a number holds nothing
            if root is not None and (passed | receiver):
                self._set(root, self._names(root) | passed | receiver)
        return frozenset({self._token(call)}) | passed | receiver

    def _step_names(self) -> set[str]:
        """The names of the steps this function calls (fixed once the layouts are known)."""
        if not hasattr(self, "_steps"):
            self._steps = {site.name for site in self.site_calls.values()}
        return self._steps

    def _helper_keeps_nothing(self, call: ast.Call) -> bool:
        """A module function (flax's `evaluate(p_eval_step=..., params=state.params, ...)`)
        that stores none of its arguments in another: no store into a part of a parameter,
        and a parameter, or part of one, handed only to functions that keep nothing either
        (this one's steps, module functions that pass this test, jax, numpy and builtins)."""
        if not (isinstance(call.func, ast.Name) and call.func.id in self.module.functions
                and call.func.id not in self.local):
            return False
        steps = {k.arg for k in call.keywords if isinstance(k.value, ast.Name)
                 and k.value.id in self._step_names()}
        return self._keeps_nothing(self.module.functions[call.func.id], steps, 0)

    def _keeps_nothing(self, function: ast.FunctionDef, steps: set[str], depth: int) -> bool:
        parameters = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        sites = self._step_names()
        for node in ast.walk(function):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                return False
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
                    else [node.target]
                if any(isinstance(part, (ast.Attribute, ast.Subscript))
                       and _root_name(part) in parameters
                       for target in targets for part in ast.walk(target)):
                    return False
            if not isinstance(node, ast.Call):
                continue
            given = [*node.args, *(k.value for k in node.keywords)]
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if not any(_root_name(v.value if isinstance(v, ast.Starred) else v) in parameters
                       for v in [*given, receiver] if v is not None):
                continue  # nothing of the parameters handed over
            name = self.qualify(node.func)
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            if name.startswith(KEEPS_NOTHING_PREFIXES) or name in KEEPS_NOTHING \
                    or self.builtin(node.func) in KEEPS_NOTHING_BUILTINS \
                    or callee in steps or callee in sites or name in TREE_MAP and given and (
                        isinstance(given[0], ast.Lambda) or self.qualify(given[0]).startswith(
                            KEEPS_NOTHING_PREFIXES)):
                continue
            if callee in self.module.functions and depth < 2 \
                    and self._keeps_nothing(self.module.functions[callee], set(), depth + 1):
                continue
            return False
        return True

    def builtin(self, function) -> str | None:
        """`len` of `len(...)` or `builtins.len(...)`, where the module does not bind the name
        to something else; None for any other function."""
        name = self.qualify(function)
        if name.startswith("builtins."):
            return name[len("builtins."):]
        if isinstance(function, ast.Name) and not name \
                and function.id not in self.module.table.bound_otherwise \
                and function.id not in self.local:
            return function.id
        return None

    # -- numbers (donation_numbers.py) ------------------------------------------------------
    def _scope_function(self) -> ast.FunctionDef:
        """The function whose names the walk reads now."""
        return self.function

    def _number_scope(self) -> tuple[set[str], set[str]]:
        """The current function's number names and every name it binds, once per function.
        Its parameters count where every call leaves their number default: only the
        caller's own (a followed method's are bound to the call's arguments)."""
        function = self._scope_function()
        cache = self.__dict__.setdefault("_number_scopes", {})
        if id(function) not in cache:
            parameters = frozenset()
            others: set[str] = set()
            if function is self.function and function.name != MODULE_CALLER:
                parameters = self.module.defaults_left_numbers(function)
            if function.name == MODULE_CALLER:  # its names are globals a def may rebind
                others = {name for n in ast.walk(self.module.tree)
                          if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
            cache[id(function)] = number_names(function, parameters, others,
                                               self._module_constants(), self.builtin,
                                               self.qualify)
        return cache[id(function)]

    def _number_names(self) -> set[str]:
        return self._number_scope()[0]

    def _is_number(self, node) -> bool:
        names, local = self._number_scope()
        return is_number(node, names, local, self._module_constants(), self.builtin,
                         self.qualify)

    def _module_constants(self) -> dict:
        if not hasattr(self, "_constants_of_module"):
            self._constants_of_module = module_constants(self.module.tree)
        return self._constants_of_module

    def _host_arrays(self, call: ast.Call, name: str) -> bool:
        """numpy arrays made anew: `tree_map(np.asarray, tree)`, or a draw from a numpy random
        generator the function made (`rng = np.random.RandomState(0)`; `rng.normal(...)`)."""
        if name in TREE_MAP and call.args and self.qualify(call.args[0]).startswith("numpy.") \
                and not any(isinstance(a, ast.Starred) for a in call.args):
            return True
        function = call.func
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Call):
            # a method of a numpy array gives a numpy array (`.astype(np.float32)`)
            receiver = function.value
            inner = self.qualify(receiver.func)
            return inner.startswith("numpy.") and isinstance(receiver.func, ast.Attribute) \
                or self._host_arrays(receiver, inner)
        if not (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)):
            return False
        if not hasattr(self, "_generators"):
            self._generators = {
                t.id for s in ast.walk(self.function) if isinstance(s, ast.Assign)
                and isinstance(s.value, ast.Call) and self.qualify(s.value.func) in NUMPY_GENERATORS
                for t in s.targets if isinstance(t, ast.Name)}
            rebound = {t.id for s in ast.walk(self.function) if isinstance(s, ast.Assign)
                       and not (isinstance(s.value, ast.Call)
                                and self.qualify(s.value.func) in NUMPY_GENERATORS)
                       for t in s.targets if isinstance(t, ast.Name)}
            self._generators -= rebound
        return function.value.id in self._generators

    def _site_call(self, call: ast.Call, site: Site) -> frozenset:
        if not isinstance(call.func, ast.Name):
            self._eval(call.func)  # a factory's or an inline pmap's own arguments
        passed = [self._eval(a) for a in call.args]
        starred = next((i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)), None)
        if starred is not None and any(i >= starred for i in donated_positions(site)):
            raise Blocker(DONATED_COPY_READ, call.args[starred],
                          f"{site.label} donates an argument that `{short(call.args[starred])}` "
                          "or an argument after it fills: which values it deletes is not "
                          "followed")
        donated = frozenset().union(*(passed[i] for i in donated_positions(site)
                                      if i < len(passed)))
        arguments = [(position, argument, tokens)
                     for position, (argument, tokens) in enumerate(zip(call.args, passed))]
        # keyword arguments: never donated by pmap, but they may hold what another one donates
        arguments += [(None, k.value, self._eval(k.value)) for k in call.keywords]
        # The same variable (or a field of it) donated and passed again in one call: the same
        # buffers twice, which pmap's copy allowed and jit refuses (`f(donate(a), a)`),
        # whatever the analysis knows of where the value came from.
        donated_roots = {_root_name(call.args[i]) for i in donated_positions(site)
                         if i < len(call.args)} - {None}
        for position, argument, tokens in arguments:
            root = _root_name(argument)
            if position not in donated_positions(site) and root in donated_roots:
                raise Blocker(DONATED_COPY_READ, argument,
                              f"`{short(argument)}` is `{root}` or part of it, which "
                              f"{site.label} donates in the same call: pmap donated a copy, the "
                              "migrated jit would be handed the donated buffers twice")
            if position not in donated_positions(site) and tokens & donated:
                raise Blocker(DONATED_COPY_READ, argument,
                              f"`{short(argument)}` may "
                              f"be donated by {site.label} in the same call, as another "
                              "argument: pmap donated a copy, the migrated jit the array itself")
        for token in donated:
            if token[0] == "global":
                raise Blocker(DONATED_COPY_READ, call,
                              f"{site.label} donates {self._what({token})}: pmap "
                              "donated a copy of it, the migrated jit deletes it, and other "
                              "code may read it later")
            self.donors.setdefault(token, (call, site))
        self._delete(donated)
        if site.out_none or has_none(site.out_tree):
            return frozenset({self._token(call)})  # pmap's unstacked result: not pmap's layout
        return frozenset()  # the step's own results: pmap deletes them too

    def _delete(self, tokens: frozenset) -> None:
        """A step deleted the values of `tokens`: every name that holds one now holds it
        deleted; a value made later from the same expression is a new one."""
        if not tokens:
            return
        self.state = State(delete_in(self.state.names, tokens),
                           self.state.donated | {deleted(t) for t in tokens})

    def _produced(self, call: ast.Call, name: str, passed: frozenset) -> frozenset:
        """A producer the caller analysis rewrote: safe, or a fresh (unsafe) value."""
        if name in SAFE_PRODUCERS:
            return frozenset()
        numpy = isinstance(call.func, ast.Attribute) and name.startswith("numpy.")
        if name in TREE_MAP and call.args and isinstance(call.args[0], ast.Lambda):
            body = call.args[0].body
            inner = self.qualify(body.func) if isinstance(body, ast.Call) else ""
            numpy = isinstance(body, ast.Call) and isinstance(body.func, ast.Attribute) \
                and inner.startswith("numpy.")
            fresh = inner.startswith("jax.numpy.")
        else:
            fresh = name.startswith("jax.numpy.")
        if numpy:
            return frozenset()  # a host array in both programs
        token = frozenset({self._token(call)})
        if fresh:  # placed with device_put(..., may_alias=False) or built anew
            return token
        return token | passed  # a reshape may be its operand itself

    def _returns_safe(self, name: str) -> bool:
        """A module helper that only returns a replicated placement (`replicate(tree)`),
        after binding local names (`devices = devices or jax.local_devices()`): what it
        returns is a new placement whatever those names hold."""
        function = self.module.functions.get(name)
        if function is None or name in self.local or function.decorator_list:
            return False
        body = [s for s in function.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        *bindings, last = body or [None]
        return last is not None and all(
            isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets)
            for s in bindings) and isinstance(last, ast.Return) \
            and isinstance(last.value, ast.Call) and self.qualify(last.value.func) in SAFE_PRODUCERS

    def _token(self, node) -> Token:
        """The token of the value `node` makes now. A value it made before that a step
        deleted is held in its deleted form (`_delete`), so this one is fresh."""
        token = ("node", id(node))
        self.origin.setdefault(token, node)
        return token


def delete_in(names: dict, tokens: frozenset) -> dict:
    """`names` (name -> tokens) with each of `tokens` in its deleted form."""
    return {name: frozenset(deleted(t) if t in tokens else t for t in held)
            if held & tokens else held for name, held in names.items()}


def donated_positions(site: Site) -> set[int]:
    if not site.donate:
        return set()
    value = ast.literal_eval(site.donate)
    return {value} if isinstance(value, int) else set(value)


def has_none(tree) -> bool:
    if isinstance(tree, dict):
        tree = tuple(tree.values())
    return isinstance(tree, tuple) and any(v is None or has_none(v) for v in tree)


def alias_path(node) -> bool:
    """A name or string-key subscripts of one (`old`, `old["w"]`): binding or testing it
    touches no array data."""
    while isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        node = node.value
    return isinstance(node, ast.Name)


def is_method(call: ast.Call, method: str) -> bool:
    if isinstance(call.func, ast.Attribute) and call.func.attr == method:
        return True
    return len(call.args) == 1 and isinstance(call.args[0], ast.Call) \
        and is_method(call.args[0], method)


def free_names(node) -> set[str]:
    """The names a closure reads that it does not bind itself (its parameters, its stores)."""
    bound = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    bound |= {n.id for n in ast.walk(node)
              if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and n.id not in bound}


def short(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _root_name(node) -> str | None:
    """`state` of `state`, `state.params` or `state["w"][0]`; None for anything else."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
