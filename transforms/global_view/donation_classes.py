"""Reads of a donated value after the call (donation.py) through the instances of a class
whose held pmap donates (classes.py): acme / jaxline-style learners,
`self._state, m = self._step(self._state, batch)`, and `Trainer` classes.

The caller that creates the instance is walked as donation.py walks a module function, and
every call of the class (its constructor, a method, `__call__`) is followed where it stands:
the method's body is walked with its parameters bound to the arguments' tokens and `self` to
the instance, so a value is followed through its attributes flow-sensitively, from one method
to the next and back to the caller. An instance attribute is a name of its own in the state
(`Trainer.state`): a store to `self.state` replaces what it holds, a store into it
(`self.state["w"] = ...`, `self.log.append(x)`) adds to it, and `old = self.state`,
`self.state["params"]` are alias paths like `old["w"]`.

That is sound because the instance is the only one of its class and nothing reaches it but
its attributes and methods:
- the class is called once in the module, as `name = Cls(...)` in the creating function
  (class_uses.py makes it the only function that does), so its attributes name one object;
- the instance (the caller's name, each method's `self`) is never used other than as
  `obj.attribute` or `obj.method(...)`: not aliased, passed, returned, stored or closed over
  (each of those is refused, naming its line), so no code the walk does not see reads it;
- a held site's call is only ever `self.<attribute>(...)` in the class's methods
  (classes.py), each in the site calls the caller analysis found, and a bound method's body
  reads the attributes it closes over at the call.

Two rules of donation.py extend to instances. A method parameter filled, at the call being
followed, by a constant int (or left to an int default) that the method never rebinds is
that constant, so `for _ in range(epochs)` with `fit(x, epochs=4)` runs 4 times. And the
overwritten read a loop may keep (`d = old.is_deleted()`) may also be stored to an instance
attribute, `self.d = old.is_deleted()`, when nothing in the loop reads an attribute of that
name (nor any method of the class, if the loop calls one): only the last iteration's value
survives the loop, and the walk proves it from the second iteration on.

A read the walk cannot rule out is a PM609 refusal (the class-held site stays faithful)
naming the read's line.
"""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import CLASS_HELD, DONATED_COPY_READ
from transforms.global_view import donation
from transforms.global_view.classes import (
    chain_members,
    class_view,
    is_super_call,
    reached_methods,
    super_method,
)
from transforms.global_view.donation import (
    DonatedReads,
    ends_early,
    parameters_of,
    scope_of,
)
from transforms.global_view.donation_values import State, delete_in, free_names, live
from transforms.global_view.sites import Blocker


def check_donated_reads(analysis) -> None:
    """donation.check_donated_reads; when a method the caller `analysis` follows calls a
    donating site, with the calls of every class holding sites followed into its methods."""
    instances = getattr(analysis, "instances", None)
    if instances is None or not any(s.donate for s in instances.site_calls.values()):
        donation.check_donated_reads(analysis)  # no method the caller follows donates
        return
    holders = {s.holder for s in analysis.all_sites.values() if s.holder}
    classes = {s.name: class_view(s, analysis.module.tree) for s in analysis.module.tree.body
               if isinstance(s, ast.ClassDef) and s.name in holders}
    walk = InstanceDonatedReads(
        analysis.function, {**instances.site_calls, **analysis.site_calls},
        {**instances.produced, **analysis.produced}, analysis.module, analysis.qualified,
        frozenset(analysis.lowerings), classes)
    # `self.step = jax.pmap(self._step, ...)`: the bound method mapped is read where the site
    # is built (its reads of `self` are checked at each call of the site).
    walk.builds = {id(n) for s in analysis.all_sites.values() if s.holder
                   for n in ast.walk(s.built)}
    try:
        walk.run()
    except Blocker as blocker:
        if blocker.code != DONATED_COPY_READ:
            raise
        raise dataclasses.replace(blocker, code=CLASS_HELD) from None


class InstanceDonatedReads(DonatedReads):
    """DonatedReads with the calls of `classes` (name -> ClassDef) followed into their
    methods; see the module docstring."""

    def __init__(self, function, site_calls, produced, module, qualify, lowerings, classes):
        super().__init__(function, site_calls, produced, module, qualify, lowerings)
        self.classes = classes
        self.constants: dict[str, int] = {}  # this frame's parameters known to be ints
        self.frames: list[list] = []  # per method being followed: its returns' (tokens, state)
        self.following: list[tuple[str, str]] = []  # (class, method) being followed
        self.methods: list[ast.FunctionDef] = []  # the methods being followed, innermost last
        self.statement = function  # the statement being walked (for refusals' lines)
        self.constructing: int | None = None  # the `name = Cls(...)` call being bound
        self.builds: set[int] = set()  # the nodes of held sites' `jax.pmap(...)` expressions

    def _scope_function(self):
        return self.methods[-1] if self.methods else self.function

    # -- the instance and its attributes --------------------------------------------------
    def _instance_name(self, node) -> str | None:
        """The class of the instance the name `node` holds, if it holds one."""
        if isinstance(node, ast.Name):
            for kind, value in self.state.names.get(node.id, ()):
                if kind == "instance":
                    return value
        return None

    def _attribute_key(self, node) -> str | None:
        """`Cls.attribute`, the state's name for `obj.attribute` of the instance."""
        if isinstance(node, ast.Attribute):
            holder = self._instance_name(node.value)
            if holder is not None:
                return f"{holder}.{node.attr}"
        return None

    def _names(self, name: str) -> frozenset:
        if "." in name:  # an attribute: unset on this path (or a class-level value)
            if name in self.state.names:
                return self.state.names[name]
            holder, attribute = name.split(".", 1)
            assigned = {t.id for s in self.classes[holder].body
                        for t in (s.targets if isinstance(s, ast.Assign) else [s.target]
                                  if isinstance(s, ast.AnnAssign) else [])
                        if isinstance(t, ast.Name)}
            return frozenset({("global", name)}) if attribute in assigned else frozenset()
        tokens = super()._names(name)
        holder = next((value for kind, value in tokens if kind == "instance"), None)
        if holder is not None:
            raise Blocker(CLASS_HELD, self.statement,
                          f"`{name}`, the `{holder}` instance, is used other than as "
                          f"`{name}.<attribute>` (line {self.statement.lineno}): where the "
                          "values it holds go is not followed, and a step this function "
                          "reaches donates")
        return tokens

    def _alias_key(self, node) -> str | None:
        path = node
        while isinstance(path, ast.Subscript) and isinstance(path.slice, ast.Constant) \
                and isinstance(path.slice.value, str):
            path = path.value
        return self._attribute_key(path) or super()._alias_key(node)

    def _root_key(self, node) -> str | None:
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            key = self._attribute_key(node)
            if key is not None:
                return key
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def _eval(self, node) -> frozenset:
        key = self._attribute_key(node)
        if key is not None:
            cls = self.classes[key.split(".")[0]]
            if id(node) not in self.builds and any(
                    isinstance(m, ast.FunctionDef) and m.name == node.attr for m in cls.body):
                raise Blocker(CLASS_HELD, node, f"`{ast.unparse(node)}` (line {node.lineno}), "
                              f"a method of `{cls.name}`, is used as a value: where it is "
                              "called, and what it reads, is not followed")
            return self._read(node, key)
        return super()._eval(node)

    def _bind(self, target, tokens: frozenset, elements: list | None = None) -> None:
        key = self._attribute_key(target)
        if key is not None:  # `obj.attribute = value` replaces what it held
            self._set(key, tokens)
        else:
            super()._bind(target, tokens, elements)

    def _what(self, tokens) -> str:
        kind, value = self._named(tokens)
        if kind == "global" and value.count(".") == 2:
            return f"the default of the parameter `{value}`"
        if kind == "global" and "." in value:
            return f"the class-level attribute `{value}`"
        return super()._what(tokens)

    # -- statements -----------------------------------------------------------------------
    def _statement(self, s) -> None:
        outer, self.statement = self.statement, s
        super()._statement(s)
        self.statement = outer

    def _assign_statement(self, s) -> None:
        value = s.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in self.classes and value.func.id not in self.local:
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                raise Blocker(CLASS_HELD, s, f"the `{value.func.id}` instance made at line "
                              f"{s.lineno} is not bound to one plain name, so its uses are not "
                              "all followed")
            if targets[0].id in self.escaping or self.introspects:
                raise Blocker(CLASS_HELD, s, f"`{targets[0].id}`, the `{value.func.id}` "
                              "instance, is declared global or nonlocal, or the function "
                              "reads its locals (`locals()`, `vars()`, ...): other code may "
                              "reach its attributes")
            self.constructing = id(value)
            self._set(targets[0].id, self._call(value))
            return
        super()._assign_statement(s)

    def _definition(self, s) -> None:
        self._closes_over_instance(s)
        super()._definition(s)

    def _return_statement(self, s: ast.Return) -> None:
        if not self.frames:
            super()._return_statement(s)
            return
        tokens = self._eval(s.value) if s.value is not None else frozenset()
        self.frames[-1].append((tokens, self.state))

    def _closes_over_instance(self, node) -> None:
        for name in sorted(free_names(node)):
            holder = self._instance_name(ast.Name(name, ast.Load()))
            if holder is not None:
                raise Blocker(CLASS_HELD, node, f"the function at line {node.lineno} closes "
                              f"over `{name}`, the `{holder}` instance, and may read its "
                              "attributes at any later time")

    # -- loops: the overwritten read into an attribute, trip counts from parameters -------
    def _overwritten_reads(self, s) -> set[int]:
        found = super()._overwritten_reads(s)
        if not isinstance(s, ast.For) or self.guarded or self.introspects \
                or self._trip_count(s) < 2 or ends_early(s):
            return found
        read = self._attributes_read(s)
        for statement in s.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and self._attribute_key(statement.targets[0]) is not None \
                    and statement.targets[0].attr not in read \
                    and self._is_deleted_read(statement.value) is not None:
                found.add(id(statement))
        return found

    def _attributes_read(self, loop: ast.For) -> set[str]:
        """The attribute names the loop reads: in its own text, and anywhere in a class whose
        instance it calls (a method, a held site or the constructor)."""
        read = {n.attr for n in ast.walk(loop)
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
        for call in (n for n in ast.walk(loop) if isinstance(n, ast.Call)):
            func = call.func
            holder = self._instance_name(func.value if isinstance(func, ast.Attribute) else func)
            if holder is None and isinstance(func, ast.Name) and func.id in self.classes:
                holder = func.id
            if holder is not None:
                read |= {n.attr for member in chain_members(self.classes[holder])
                         for n in ast.walk(member)
                         if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
        return read

    def _constant_int(self, node) -> int | None:
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        return super()._constant_int(node)

    # -- calls ----------------------------------------------------------------------------
    def _call(self, call: ast.Call) -> frozenset:
        func = call.func
        if isinstance(func, ast.Name) and func.id in self.classes and func.id not in self.local:
            return self._construct(call, self.classes[func.id])
        holder = self._instance_name(func)
        if holder is not None:  # `obj(...)`
            return self._follow(call, self.classes[holder], "__call__", func.id)
        if isinstance(func, ast.Attribute) and is_super_call(func.value) and self.following:
            # `super().__init__(...)` in a method followed: the base's method, on the instance
            cls, method = self.classes[self.following[-1][0]], self.methods[-1]
            base = super_method(cls, method, call)
            return self._method(call, cls, base.name, self.state.names[method.args.args[0].arg],
                                base)
        holder = self._instance_name(func.value) if isinstance(func, ast.Attribute) else None
        if holder is None:
            return super()._call(call)
        site = self.site_calls.get(id(call))
        if site is not None:
            # the mapped method (and the methods it runs through self) reads attributes
            cls = self.classes[holder]
            for method in reached_methods(site.body, cls) if site.bound_self else ():
                me = method.args.args[0].arg
                for node in ast.walk(method):
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                            and node.value.id == me:
                        self._read(call, f"{holder}.{node.attr}")
            return self._site_call(call, site)
        return self._follow(call, self.classes[holder], func.attr, func.value.id)

    def _construct(self, call: ast.Call, cls: ast.ClassDef) -> frozenset:
        uses = [n for n in ast.walk(self.module.tree)
                if isinstance(n, ast.Name) and n.id == cls.name and isinstance(n.ctx, ast.Load)]
        if len(uses) != 1:
            lines = ", ".join(str(n.lineno) for n in uses)
            raise Blocker(CLASS_HELD, call, f"`{cls.name}` is used more than once in the "
                          f"module (lines {lines}): the attributes of its instances are not "
                          "told apart")
        if self.constructing != id(call):
            raise Blocker(CLASS_HELD, call, f"`{cls.name}(...)` at line {call.lineno} is not "
                          f"the value of a `name = {cls.name}(...)` statement, so where its "
                          "instance goes is not followed")
        self.constructing = None
        instance = frozenset({("instance", cls.name)})
        if any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in cls.body):
            self._method(call, cls, "__init__", instance)
        else:
            self._arguments(call)
        return instance

    def _follow(self, call, cls: ast.ClassDef, name: str, holder_name: str) -> frozenset:
        methods = {m.name for m in cls.body if isinstance(m, ast.FunctionDef)}
        if name not in methods:
            raise Blocker(CLASS_HELD, call, f"`{ast.unparse(call.func)}` (line {call.lineno}) "
                          f"is neither a method of `{cls.name}` nor a call of a pmap it holds "
                          "that the analysis found: what it does with the values it is given "
                          "is not followed")
        return self._method(call, cls, name, self.state.names[holder_name])

    def _arguments(self, call: ast.Call) -> None:
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            self._eval(argument)

    def _method(self, call: ast.Call, cls: ast.ClassDef, name: str, instance,
                method: ast.FunctionDef | None = None) -> frozenset:
        """Walk the method `name` (or the base's `method` a `super()` call reaches) where it
        is called; its returns' tokens."""
        method = method or next(m for m in cls.body if isinstance(m, ast.FunctionDef)
                                and m.name == name)
        arguments = method.args
        if (cls.name, name) in self.following and method in self.methods \
                or len(self.following) >= 8 \
                or arguments.vararg or arguments.kwarg or arguments.kwonlyargs \
                or arguments.posonlyargs or not arguments.args \
                or any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg is None for k in call.keywords):
            raise Blocker(CLASS_HELD, call, f"`{cls.name}.{name}` is called recursively, too "
                          "deep, or with * / ** or parameters the donated-read check does not "
                          "follow")
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in _own_nodes(method)):
            raise Blocker(CLASS_HELD, call, f"`{cls.name}.{name}` is a generator: its body "
                          "runs as it is iterated, not where it is called")
        names = [a.arg for a in arguments.args]
        given = dict(zip(names[1:], call.args))
        given.update({k.arg: k.value for k in call.keywords})
        defaults = dict(zip(names[len(names) - len(arguments.defaults):], arguments.defaults))
        stored = {n.id for n in ast.walk(method) if isinstance(n, ast.Name)
                  and not isinstance(n.ctx, ast.Load)}
        bound, constants = {names[0]: instance}, {}
        for parameter in names[1:]:
            value = given.get(parameter, defaults.get(parameter))
            if value is None:
                raise Blocker(CLASS_HELD, call, f"`{cls.name}.{name}` is called without "
                              f"`{parameter}`")
            if parameter in given:
                bound[parameter] = self._eval(value)
            else:  # a default, made when the class was: a constant, or a value not in sight
                bound[parameter] = frozenset() if isinstance(value, ast.Constant) \
                    else frozenset({("global", f"{cls.name}.{name}.{parameter}")})
            number = self._constant_int(value) if parameter in given else (
                value.value if isinstance(value, ast.Constant) and type(value.value) is int
                else None)
            if number is not None and parameter not in stored:
                constants[parameter] = number
        saved = (self.state.names, self.local, self.escaping, self.introspects,
                 self.constants, self.state.donated)
        attributes = {k: v for k, v in self.state.names.items() if "." in k}
        self.state = State({**attributes, **bound}, self.state.donated)
        for parameter, tokens in bound.items():
            self.held.setdefault(parameter, set()).update(tokens)
        self.local, self.escaping, self.introspects = scope_of(method)
        self.introspects = self.introspects or saved[3]
        self.constants = constants
        self.frames.append([])
        self.following.append((cls.name, name))
        self.methods.append(method)
        assert set(parameters_of(method)) == set(bound)
        self._block(method.body)
        self.following.pop()
        self.methods.pop()
        returns = self.frames.pop()
        for declared in self.escaping:  # a global the method sets: read at any later time
            self.closures.append((method, {declared}))
        end = self.state
        for _, state in returns:
            end = end.join(state)
        names, self.local, self.escaping, self.introspects, self.constants, before = saved
        # what a step the method ran deleted, the caller's names hold deleted too
        names = delete_in(names, frozenset(live(t) for t in end.donated - before))
        names = {**names, **{k: v for k, v in end.names.items() if "." in k}}
        self.state = State(names, end.donated)
        return frozenset().union(*(tokens for tokens, _ in returns))


def _own_nodes(function: ast.FunctionDef):
    """The nodes of `function`'s body, not those of a def, lambda or class nested in it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
