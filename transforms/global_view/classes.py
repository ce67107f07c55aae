"""Pmaps held by a class, for the global style: `self.step = jax.pmap(...)` (or a module
factory's returned pmap, `self.step = make_step(lr)`) in a class's `__init__` or any other of
its methods (built when that method runs, as experiment frameworks build theirs in
`_initialize_train`), called as `self.step(...)` from its methods on state kept on `self` or
handed back to module code.

Such a site goes global only when every use is in sight, because the class's methods then
take and give global arrays:
- the class is defined at module level, has no decorators or decorated methods other than
  `@property` ones (instances.py follows them where the attribute is read), and nothing in the
  module subclasses it; its bases, if any, are a single-inheritance chain of module-level
  classes used nowhere else, whose methods it inherits (class_view: one class as its instances
  run it, `super().name(...)` resolved to the base's method). A pmap built by a class that
  exactly one module class inherits from is held by that subclass (_holder);
- every call of the attribute is on an instance the analysis follows: `self.attr(...)` in the
  class's methods, or `obj.attr(...)` in the function binding `obj = Cls(...)`; the same
  attribute name on another class's instance is not this pmap (class_receivers.py);
- the attribute is assigned once on the class's instances, by a statement of a method's own
  body (not in an `if` or loop of it), a `None` placeholder in a method aside;
- the class is instantiated in one module-level function only (that function builds the mesh
  and runs under it), and its instances never escape it (not passed, stored or returned);
- the mapped function is a lambda, a module-level def, a def nested in the building method
  or in the factory, or a plain method bound as `self.<method>` whose body reads only attributes of
  `self` that the migration leaves as they are.
A site that donates goes global only if donation_classes.py proves, following values through
the instance's attributes and methods, that no value pmap donated a copy of is read after the
call (the caller stays faithful otherwise, PM609 naming the read's line).
The instances' attributes get one kind each (joined over every store, `None` placeholders
aside), methods are followed like helpers with their arguments' kinds, and the function that
creates the instances is re-analysed until those kinds settle. Anything else is a PM609
finding naming the line; the site and its callers stay faithful. This module finds the sites;
class_uses.py finds who creates the instances.
"""

from __future__ import annotations

import ast
import copy
import dataclasses

from transforms.codes.global_view import CLASS_HELD, OPTIONS
from transforms.global_view.class_receivers import assignment_of, receivers
from transforms.global_view.site_options import assigned_site, make_site
from transforms.global_view.sites import (
    PMAP,
    Blocker,
    Site,
    dotted,
    keeps_behaviour,
    pmap_call,
    pmap_call_options,
)

# Special methods run only by explicit calls the analysis sees (or by printing, which it
# refuses for instances as an escape).
_PLAIN_DUNDERS = {"__init__", "__call__", "__repr__", "__str__"}


@dataclasses.dataclass
class HeldClass:
    """A module-level class that holds global-style sites."""

    node: ast.ClassDef
    sites: dict[str, Site]  # attribute -> site
    methods: dict[str, ast.FunctionDef]

    @property
    def name(self) -> str:
        return self.node.name


# -- finding the sites -------------------------------------------------------------------------
def find_class_sites(tree: ast.Module, imported, functions, constants, claimed: set[int]):
    """The sites held by module-level classes, and a PM609 blocker for every class-held pmap
    that does not qualify. Claims (adds to `claimed`) the pmap references it reports on."""
    sites, blockers = [], []
    factories = {name: f for name, f in functions.items() if _returned_pmap(f, imported)}
    for statement in tree.body:
        if not isinstance(statement, ast.ClassDef):
            continue
        held = _held_assignments(statement, imported, factories, claimed)
        if not held:
            continue
        holder = _holder(statement, tree)
        for target, value, pmap_node, factory in held:
            try:
                site = _held_site(statement, holder, target, value, factory, tree, imported,
                                  functions, constants)
                sites.append(site)
            except Blocker as blocker:
                blockers.append(blocker)
            claimed.update(id(n) for n in ast.walk(factory or pmap_node))
    return sites, blockers


def _returned_pmap(function: ast.FunctionDef, imported) -> ast.Call | None:
    """The `jax.pmap(...)` a module function returns as its last statement, when it is the
    function's only pmap and its only return (and its decorators, if any, keep its behaviour)."""
    last = function.body[-1] if function.body else None
    if not keeps_behaviour(function, imported) or not (isinstance(last, ast.Return)
                                       and isinstance(last.value, ast.Call)
                                       and dotted(last.value.func, imported) == PMAP):
        return None
    others = [n for n in ast.walk(function) if isinstance(n, (ast.Name, ast.Attribute))
              and dotted(n, imported) == PMAP and n is not last.value.func]
    return None if others or any(_own_returns(s) for s in function.body[:-1]) else last.value


def _own_returns(statement) -> bool:
    """`statement` holds a return of its own function (not of a def or lambda nested in it)."""
    if isinstance(statement, ast.Return):
        return True
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return False
    return any(_own_returns(child) for child in ast.iter_child_nodes(statement))


def _held_assignments(cls: ast.ClassDef, imported, factories, claimed):
    """(target, value, pmap node, factory or None) of each pmap the class builds or gets from
    a factory: in a method, `self.x = jax.pmap(...)` / `self.x = factory(...)`, or any other
    pmap reference in the class body (reported as not qualifying)."""
    found = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            pmapped = pmap_call(node.value, imported)
            factory = node.value.func.id if isinstance(node.value.func, ast.Name) \
                and node.value.func.id in factories else None
            if pmapped is not None and id(pmapped.func) not in claimed:
                found.append((node, node.value, pmapped, None))
            elif factory is not None:
                found.append((node, node.value, _returned_pmap(factories[factory], imported),
                              factories[factory]))
    inside = {id(n) for _, value, _, _ in found for n in ast.walk(value)}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) \
                and dotted(node, imported) == PMAP and id(node) not in inside \
                and id(node) not in claimed:
            found.append((None, node, node, None))
            inside.update(id(n) for n in ast.walk(node))
    return found


def _holder(cls: ast.ClassDef, tree: ast.Module) -> ast.ClassDef:
    """The class whose instances run `cls`'s code: `cls`, or, when exactly one module-level
    class inherits from it, that class's holder (a framework's base class builds the pmap in
    its `__init__`, the experiment subclassing it is what the program instantiates).
    _class_shape then refuses a base that is used other than as that subclass's base."""
    current, seen = cls, {id(cls)}
    while True:
        below = [s for s in tree.body if isinstance(s, ast.ClassDef)
                 and any(isinstance(b, ast.Name) and b.id == current.name for b in s.bases)]
        if len(below) != 1 or id(below[0]) in seen:
            return current
        current = below[0]
        seen.add(id(current))


def _held_site(cls: ast.ClassDef, holder: ast.ClassDef, statement, value, factory, tree,
               imported, functions, constants) -> Site:
    """The site of one pmap the class `cls` holds, for the instances of `holder` (cls or its
    one subclass chain's last class: _holder); a Blocker (at the pmap) naming what keeps it
    faithful otherwise."""
    where = value if factory is None else _returned_pmap(factory, imported)
    where = pmap_call(where, imported) or where
    if statement is None:
        inside = next((m.name for m in cls.body if isinstance(m, ast.FunctionDef)
                       and any(n is value for n in ast.walk(m))), None)
        raise Blocker(CLASS_HELD, where,
                      f"this pmap is used in the class `{cls.name}`"
                      + (f" (in `{inside}`)" if inside else "") + " other than as "
                      "`self.<name> = jax.pmap(...)`: kept in the faithful style")
    method = _building_method(cls, statement)
    target = statement.targets[0] if len(statement.targets) == 1 else None
    self_name = method.args.args[0].arg if method is not None and method.args.args else None
    if method is None or not (isinstance(target, ast.Attribute)
                              and isinstance(target.value, ast.Name)
                              and target.value.id == self_name):
        raise Blocker(CLASS_HELD, where, f"this pmap is held by `{cls.name}` other than as "
                      "`self.<name> = ...` (" + _how_built(cls, statement, target)
                      + "): kept in the faithful style")
    attribute = target.attr
    cls = holder
    _class_shape(cls, tree, where)
    cls = class_view(cls, tree)  # with the methods it inherits from bases in the module
    _single_assignment(attribute, statement, tree, cls, where)
    _called_through_self(cls, attribute, tree, where)
    if factory is not None:
        site = _factory_held(factory, value, tree, imported, functions, constants)
    else:
        site = _method_held(cls, method, value, imported, functions, constants)
    if site.static:
        raise Blocker(OPTIONS, site.node, "static_broadcasted_argnums on a pmap held by a class")
    prop = next((m for m in cls.body if is_property(m)), None)
    if site.donate and prop is not None:
        raise Blocker(CLASS_HELD, where, f"this pmap donates, and `{cls.name}.{prop.name}` "
                      f"(line {prop.lineno}) is a property, whose reads the donated-read check "
                      "does not follow")
    site.holder, site.attribute, site.name = cls.name, attribute, attribute
    return site


# -- base classes in the module ----------------------------------------------------------------
def _base_chain(cls: ast.ClassDef, tree: ast.Module, where=None) -> list[ast.ClassDef]:
    """`cls` and the classes it inherits from, root first: single inheritance from classes
    defined at the module's top level, none with a metaclass or decorators. A Blocker at
    `where` otherwise (a base in another module, several bases, ...)."""
    defined = [s.name for s in tree.body if isinstance(s, ast.ClassDef)]
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)
               and defined.count(s.name) == 1}  # a name defined twice: which one is a base?
    chain, current = [], cls
    while True:
        if current.keywords or current.decorator_list:
            raise Blocker(CLASS_HELD, where or current,
                          f"`{current.name}` has a metaclass or decorators: methods it "
                          "inherits or that others override are not seen, so its pmaps stay "
                          "faithful")
        chain.insert(0, current)
        if not _bases(current):
            return chain
        base = current.bases[0]
        if len(current.bases) > 1 or not isinstance(base, ast.Name) \
                or base.id not in classes or classes[base.id] in chain:
            raise Blocker(CLASS_HELD, where or current,
                          f"`{current.name}` inherits from `{ast.unparse(base)}`"
                          + (" and others" if len(current.bases) > 1 else "")
                          + ", not a class of this module: its inherited methods are unseen")
        current = classes[base.id]


def _bases(cls: ast.ClassDef) -> list[ast.expr]:
    """The class's bases, a lone `object` (the implicit base, written out) left out."""
    bases = cls.bases
    if len(bases) == 1 and isinstance(bases[0], ast.Name) and bases[0].id == "object":
        return []
    return bases


def class_view(cls: ast.ClassDef, tree: ast.Module) -> ast.ClassDef:
    """`cls` as its instances see it: a class with no bases is itself; a class with base
    classes in the module (`_base_chain`) is one synthetic class of the same name whose body
    holds the statements of its bases and its own, a method overriding the base's of its name
    (Python's method resolution for single inheritance). `view.chain`: the classes whose code
    its instances run, root first (walk them, not the view, to see every method, overridden
    ones too); `view.supers[id(method)]` maps the names `super().name(...)` reaches from
    `method` to the base methods it runs."""
    if not _bases(cls):
        return cls  # no `chain` / `supers`: read them with getattr, as chain_members does
    chain = _base_chain(cls, tree)
    members: dict[str, ast.stmt] = {}
    others: list[ast.stmt] = []
    supers = {}
    for current in chain:
        visible = {n: m for n, m in members.items() if isinstance(m, ast.FunctionDef)}
        for member in current.body:
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                members.pop(member.name, None)
                members[member.name] = member
                supers[id(member)] = visible
            else:
                others.append(member)
    view = ast.ClassDef(name=cls.name, bases=[], keywords=[], body=others + list(members.values()),
                        decorator_list=[], type_params=[])
    ast.copy_location(view, cls)
    view.end_lineno, view.end_col_offset = cls.end_lineno, cls.end_col_offset
    view.chain, view.supers = chain, supers
    return view


def view_of(cls: ast.ClassDef, tree: ast.Module) -> ast.ClassDef:
    """class_view, or the class alone where its bases are not followed (they are not in the
    module, ...): what of its code is in sight."""
    try:
        return class_view(cls, tree)
    except Blocker:
        return cls


def chain_members(view: ast.ClassDef) -> list[ast.stmt]:
    """Every statement of the bodies of the classes `view` runs (class_view's chain)."""
    return [member for current in getattr(view, "chain", [view]) for member in current.body]


def super_method(view: ast.ClassDef, method: ast.FunctionDef, call: ast.Call):
    """The base method `super().name(...)` (`call`) runs from `method`, or None when the call
    is not such a call; a Blocker when it is one that the class's bases do not resolve."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and is_super_call(func.value)):
        return None
    found = getattr(view, "supers", {}).get(id(method), {}).get(func.attr)
    if found is None:
        raise Blocker(CLASS_HELD, call, f"`{ast.unparse(func)}(...)` (line {call.lineno}) "
                      f"in `{view.name}.{method.name}` reaches no method of its base classes "
                      "in the module that the global style follows")
    return found


def is_super_call(node) -> bool:
    """`super()` with no arguments, the builtin (not a name the module binds)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == "super" and not node.args and not node.keywords


def _class_shape(cls: ast.ClassDef, tree: ast.Module, where) -> None:
    """The class (with the bases it inherits from in the module) is one the global style
    follows: plain methods, `super()` only as `super().method(...)`, not subclassed."""
    chain = _base_chain(cls, tree, where)
    if any(c.bases and not _bases(c) for c in chain) and _binds(tree, "object"):
        raise Blocker(CLASS_HELD, where, f"a class `{cls.name}` inherits from names `object` "
                      "as its base, which the module binds to something else")
    bases = {id(c.bases[0]) for c in chain[1:]}
    for base in chain[:-1]:
        use = next((n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == base.name
                    and id(n) not in bases), None)
        if use is not None:
            raise Blocker(CLASS_HELD, where,
                          f"`{base.name}`, a base of `{cls.name}`, is used at line {use.lineno} "
                          f"other than as the base `{cls.name}` inherits from: its methods, "
                          f"which the migration edits for `{cls.name}`'s instances, would run "
                          "for others too")
    view = class_view(cls, tree)
    code = [n for member in chain_members(view) for n in ast.walk(member)]
    supers = {id(n.func.value.func) for n in code if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and is_super_call(n.func.value)}
    for node in code:
        if isinstance(node, ast.Name) and node.id in ("super", "__class__") \
                and id(node) not in supers:
            raise Blocker(CLASS_HELD, where,
                          f"`{node.id}` at line {node.lineno} is used other than as "
                          f"`super().method(...)` in a method of `{cls.name}`: what it "
                          "reaches is not followed")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == cls.name for b in node.bases):
            raise Blocker(CLASS_HELD, where,
                          f"`{cls.name}`, which holds this pmap, is subclassed by "
                          f"`{node.name}` (line {node.lineno}), whose methods may call it with "
                          "other layouts")
    for member in chain_members(view):
        if is_property(member) and not _binds(tree, "property"):
            continue  # run by reading the attribute: instances.py follows it there
        if isinstance(member, (ast.AsyncFunctionDef, ast.ClassDef)) or (
                isinstance(member, ast.FunctionDef) and member.decorator_list):
            raise Blocker(CLASS_HELD, where,
                          f"`{cls.name}.{member.name}` (line {member.lineno}) is "
                          "decorated, async or a nested class: the global style follows plain "
                          "methods only")
        if isinstance(member, ast.FunctionDef) and member.name.startswith("__") \
                and member.name.endswith("__") and member.name not in _PLAIN_DUNDERS:
            raise Blocker(CLASS_HELD, where,
                          f"`{cls.name}.{member.name}` (line {member.lineno}) is "
                          "run by Python implicitly (attribute access, operators, iteration, "
                          "...), where the global style cannot follow it")


def is_property(member) -> bool:
    """`@property def name(self): ...`: a method Python runs when the attribute is read (the
    module does not rebind `property`: _class_shape)."""
    arguments = member.args if isinstance(member, ast.FunctionDef) else None
    return arguments is not None and len(member.decorator_list) == 1 \
        and isinstance(member.decorator_list[0], ast.Name) \
        and member.decorator_list[0].id == "property" and len(arguments.args) == 1 \
        and not (arguments.posonlyargs or arguments.vararg or arguments.kwonlyargs
                 or arguments.kwarg)


def _binds(tree: ast.Module, name: str) -> bool:
    """The module binds `name` (a def, class, import or assignment), shadowing a builtin."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load) \
                or isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name \
                or isinstance(node, ast.alias) and (node.asname or node.name) == name:
            return True
    return False


def _single_assignment(attribute: str, statement, tree: ast.Module, cls, where) -> None:
    """The attribute holding the pmap is bound once on `cls`'s instances: other stores of
    `.attribute` are on instances of other classes (class_receivers.py), or a `None`
    placeholder in a method of `cls` (calling it fails in both programs alike)."""
    known, assigned = receivers(tree), assignment_of(tree)
    own = {id(c) for c in getattr(cls, "chain", [cls])}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == attribute \
                and not isinstance(node.ctx, ast.Load) and node is not statement.targets[0]:
            receiver = known.get(id(node))
            if receiver is not None and _another_class(receiver, cls, own):
                continue
            store = assigned.get(id(node))
            if receiver is not None and receiver.method is not None \
                    and id(receiver.method) in own and store is not None \
                    and isinstance(store.value, ast.Constant) and store.value.value is None:
                continue
            raise Blocker(CLASS_HELD, where,
                          f"the attribute `{attribute}` of `{cls.name}` holding "
                          f"this pmap is assigned again at line {node.lineno} "
                          f"(`{ast.unparse(node)}`), so which pmap a call reaches is not known: "
                          "kept in the faithful style")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("setattr", "delattr", "vars"):
            raise Blocker(CLASS_HELD, where,
                          f"`{node.func.id}(...)` at line {node.lineno} may rebind "
                          f"the attribute `{attribute}` of `{cls.name}` holding this pmap")


def _another_class(receiver, cls, own: set[int]) -> bool:
    """The receiver is an instance of a module class other than `cls` and its bases (a
    subclass of `cls` is refused by _class_shape, a base used elsewhere too)."""
    if receiver.method is not None:
        return id(receiver.method) not in own
    return receiver.cls != cls.name and receiver.cls not in {
        c.name for c in getattr(cls, "chain", [cls])}


def _called_through_self(cls: ast.ClassDef, attribute: str, tree: ast.Module, where) -> None:
    """Every load of `.attribute` on an instance of `cls` is a call the analysis follows:
    `self.attribute(...)` in a method of `cls`, or `obj.attribute(...)` in the module function
    that binds `obj = Cls(...)` (instances.py follows the instance there). Loads on instances of
    other classes (class_receivers.py) are not this pmap."""
    calls = set()
    for member in chain_members(cls):
        if isinstance(member, ast.FunctionDef) and member.args.args:
            me = member.args.args[0].arg
            for node in ast.walk(member):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == attribute and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == me:
                    calls.add(id(node.func))
    known = receivers(tree)
    own = {id(c) for c in getattr(cls, "chain", [cls])}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == attribute:
            receiver = known.get(id(node.func))
            if receiver is not None and receiver.method is None and not receiver.nested \
                    and receiver.cls == cls.name:
                calls.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == attribute \
                and isinstance(node.ctx, ast.Load) and id(node) not in calls:
            receiver = known.get(id(node))
            if receiver is not None and _another_class(receiver, cls, own):
                continue
            raise Blocker(CLASS_HELD, where,
                          f"`{ast.unparse(node)}` at line {node.lineno} uses this "
                          f"pmap `{cls.name}` holds other than as a call on an instance the "
                          "analysis follows (`self` in its methods, or in the function that "
                          "creates it): not every call is seen")


def _how_built(cls: ast.ClassDef, statement, target) -> str:
    """Where and how a pmap the class holds other than as a method's `self.x = ...` is built."""
    inside = next((m for m in cls.body if isinstance(m, ast.FunctionDef)
                   and any(n is statement for n in ast.walk(m))), None)
    where = f"at line {statement.lineno}" if inside is None else \
        f"in `{inside.name}` (line {statement.lineno})"
    me = inside.args.args[0].arg if inside is not None and inside.args.args else None
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and target.value.id == me):
        what = ast.unparse(target) if target is not None else "several targets"
        return f"bound to `{what}` {where}, not to `{me or 'self'}`"
    return f"assigned {where} in a block or a nested def"


def _building_method(cls: ast.ClassDef, statement) -> ast.FunctionDef | None:
    """The plain method of `cls` whose own body (not a nested block) holds `statement`."""
    return next((m for m in cls.body if isinstance(m, ast.FunctionDef)
                 and any(s is statement for s in m.body)), None)


def _method_held(cls, method, value, imported, functions, constants) -> Site:
    """`self.x = jax.pmap(f, ...)` in a method's body (`__init__` or any other: the attribute
    is assigned once, so every call of `self.x` reaches this pmap, built when that method ran):
    f a lambda, a module def, a def nested in that method, or a bound plain method `self.m`."""
    call = pmap_call(value, imported)
    function, positional, keywords = pmap_call_options(call, imported)
    me = method.args.args[0].arg
    nested = {s.name: s for s in method.body if isinstance(s, ast.FunctionDef)}
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) \
            and function.value.id == me and function.attr in methods:
        method = methods[function.attr]
        if not method.args.args or method.args.posonlyargs:
            raise Blocker(OPTIONS, call, f"the bound method `{function.attr}` has no plain "
                          "`self` parameter")
        _reads_plain_attributes(method, cls, call)
        unbound = copy.copy(method)
        unbound.args = copy.copy(method.args)
        unbound.args.args = method.args.args[1:]
        unbound.args.defaults = method.args.defaults[-len(unbound.args.args):] \
            if unbound.args.args else []
        site = make_site(function.attr, call, value, unbound, positional, keywords, False,
                         constants)
        site.body, site.function_node = method, function
        site.bound_self = me
    elif isinstance(function, ast.Name) and function.id in nested \
            and _bound_once(method, function.id):
        site = make_site(function.id, call, value, nested[function.id], positional, keywords,
                         False, constants)
        site.function_node, site.enclosing = function, method
    else:
        site = assigned_site(ast.unparse(function) if function else "pmap", call, value,
                             imported, functions, constants)
    site.replaced = value if value is not call else None
    return site


def _reads_plain_attributes(method: ast.FunctionDef, cls: ast.ClassDef, where) -> None:
    """A bound method mapped by pmap sees `self` as a closure: it may read attributes of it
    (checked against the attributes' kinds at the calls) and use the class's other plain
    methods through it (`self._loss_fn(...)`, `jax.grad(self._loss_fn)`), which run inside
    the trace under the same rule (reached_methods); not store on `self` or pass it on."""
    reached_methods(method, cls)


def reached_methods(method: ast.FunctionDef, cls: ast.ClassDef) -> list[ast.FunctionDef]:
    """`method` and the plain methods of `cls` (a class_view) it uses through its `self`,
    transitively: each may use its `self` only as `self.attribute` (a load) or `self.m` of a
    plain method m; a Blocker naming the first other use."""
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)
               and not m.name.startswith("__")}
    reached, pending = [], [method]
    while pending:
        current = pending.pop()
        if any(current is m for m in reached):
            continue
        reached.append(current)
        if not current.args.args or current.args.posonlyargs:
            raise Blocker(CLASS_HELD, current, f"the method `{current.name}` that pmap's mapped "
                          "method uses has no plain `self` parameter")
        me = current.args.args[0].arg
        uses = set()
        for node in ast.walk(current):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == me and isinstance(node.ctx, ast.Load):
                uses.add(id(node.value))
                if node.attr in methods:
                    pending.append(methods[node.attr])
        for node in ast.walk(current):
            if isinstance(node, ast.Name) and node.id == me and id(node) not in uses \
                    and node is not current.args.args[0]:
                raise Blocker(CLASS_HELD, node, f"the method `{current.name}`, which pmap's "
                              f"mapped method `{method.name}` runs, uses `{me}` other than to "
                              f"read a plain attribute or use a plain method (line "
                              f"{node.lineno}): what it reaches through it is not followed")
    return reached


def _bound_once(function: ast.FunctionDef, name: str) -> bool:
    stores = [n for n in ast.walk(function) if (isinstance(n, ast.Name) and n.id == name
                                                and not isinstance(n.ctx, ast.Load))
              or (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
              or (isinstance(n, ast.arg) and n.arg == name)]
    return len(stores) == 1


def _factory_held(factory: ast.FunctionDef, value: ast.Call, tree, imported, functions,
                  constants) -> Site:
    """`self.x = make_step(...)`: the module function's returned pmap, built each time the
    factory is called. The factory is called only here; an axis_name that is one of its
    parameters counts when its default is a string and this call leaves it to the default."""
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == factory.name
             and isinstance(n.ctx, ast.Load)]
    if len(loads) != 1 or loads[0] is not value.func:
        raise Blocker(CLASS_HELD, value,
                      f"the pmap factory `{factory.name}` is used elsewhere in the "
                      "module too, so not every pmap it builds can be followed")
    call = _returned_pmap(factory, imported)
    local = _defaulted_strings(factory, value)
    nested = {s.name: s for s in factory.body if isinstance(s, ast.FunctionDef)}
    function, positional, keywords = pmap_call_options(call, imported)
    scope = {**constants, **local}
    if isinstance(function, ast.Name) and function.id in nested \
            and _bound_once(factory, function.id):
        site = make_site(factory.name, call, factory, nested[function.id], positional, keywords,
                         False, scope)
        site.function_node, site.enclosing = function, factory
    else:
        site = assigned_site(factory.name, call, factory, imported, functions, scope)
    site.factory, site.constants = True, local
    for argument in [*value.args, *(k.value for k in value.keywords)]:
        if isinstance(argument, ast.Starred) or value.keywords and any(
                k.arg is None for k in value.keywords):
            raise Blocker(CLASS_HELD, value, f"`{factory.name}` called with *args or **kwargs")
    return site


def _defaulted_strings(factory: ast.FunctionDef, call: ast.Call) -> dict[str, str]:
    """Parameters of `factory` with a string default that `call` leaves to it and that the
    factory never rebinds (a nested function or lambda may not shadow them either)."""
    arguments = factory.args
    positional = arguments.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]],
                        arguments.defaults))
    passed = {a.arg for a in positional[:len(call.args)]} | {k.arg for k in call.keywords}
    found = {}
    for name, default in defaults.items():
        if name in passed or not (isinstance(default, ast.Constant)
                                  and isinstance(default.value, str)):
            continue
        if _bound_once(factory, name):
            found[name] = default.value
    return found
