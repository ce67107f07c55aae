"""Following the instances of classes that hold global sites (classes.py decides which), in
a caller of those sites: the constructor and methods are followed like helpers with their
arguments' kinds, `obj.attribute` loads and stores go through one kind per (class, attribute)
joined over every store, and `self.step(...)` is the held site's call. The function that makes
the instances is analysed again until the attributes' kinds settle. An instance may not escape
(passed on, returned, called without a `__call__`), and each method must migrate to one text
for all its calls.
"""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import (
    CLASS_HELD,
    CONSUMER_UNKNOWN,
    OPTIONS,
    OUTPUT_NOT_REPLICATED,
    PRODUCER_UNKNOWN,
    UNAVAILABLE,
)
from transforms.global_view.classes import (
    HeldClass,
    class_view,
    is_property,
    is_super_call,
    reached_methods,
    super_method,
)
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import SAME, Kind, describe


@dataclasses.dataclass
class InstanceModel:
    """What the instances of held classes hold, shared by a caller and the methods it follows.
    One kind per (class, attribute), joined over every store; `dirty` when a store changed an
    attribute after it was read, so the caller is analysed again from the joined kinds."""

    attributes: dict[tuple[str, str], Kind] = dataclasses.field(default_factory=dict)
    read: set = dataclasses.field(default_factory=set)
    dirty: bool = False
    method_edits: dict = dataclasses.field(default_factory=dict)
    active: set = dataclasses.field(default_factory=set)
    # What the methods followed found, by node id, for the donated-read check
    # (donation_classes.py): their calls of held sites and their recognised producers.
    site_calls: dict = dataclasses.field(default_factory=dict)
    produced: dict = dataclasses.field(default_factory=dict)


class InstancesMixin:
    """`CallerAnalysis`'s following of instances of classes that hold global sites."""

    instances: InstanceModel | None = None

    def _analyse_body(self) -> None:
        """The caller's body; with held sites, again until the instances' kinds settle."""
        if self.depth or not any(s.holder for s in self.all_sites.values()):
            self._block(self.function.body)
            return
        seed: dict = {}
        for _ in range(8):
            trial = type(self)(self.function, self.all_sites, self.module)
            for flag in ("merge_outputs", "per_device_scalars", "batches_placed", "unhoisted"):
                setattr(trial, flag, getattr(self, flag))
            trial.instances = InstanceModel(attributes=dict(seed))
            try:
                trial._block(trial.function.body)
            except Blocker:
                if not trial.instances.dirty:
                    raise
            if not trial.instances.dirty:
                for node, kind in trial.returns:
                    if _holds_instance(kind):
                        raise Blocker(CLASS_HELD, node,
                                      "an instance of a class whose pmaps go global "
                                      "is returned, so its later uses are not seen")
                self.__dict__.update(trial.__dict__)
                return
            seed = trial.instances.attributes
        raise Blocker(CONSUMER_UNKNOWN, self.function,
                      "the kinds of the instances' attributes do not "
                      "settle")

    # -- the classes ---------------------------------------------------------------------
    def _held_class(self, name: str) -> HeldClass | None:
        held = {a: s for s in self.all_sites.values() if s.holder == name for a in [s.attribute]}
        if not held or self.instances is None:
            return None
        node = class_view(next(s for s in self.module.tree.body
                               if isinstance(s, ast.ClassDef) and s.name == name), self.module.tree)
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        return HeldClass(node, held, methods)

    def _instance_of(self, node) -> HeldClass | None:
        """The class of `node` when it is a name holding an instance (read without evaluating
        anything: other attribute chains keep their own rules)."""
        if not isinstance(node, ast.Name):
            return None
        kind = self.kinds.get(node.id, SAME)
        return self._held_class(kind.holder) if kind.tag == "instance" else None

    def _instance_call(self, call: ast.Call) -> Kind | None:
        """A constructor call, a method call, or a held site's call; None for other calls
        (after refusing to let an instance escape into them)."""
        func = call.func
        if isinstance(func, ast.Name) and self.kinds.get(func.id, SAME).tag == "instance":
            held = self._instance_of(func)
            if "__call__" not in held.methods:
                raise Blocker(CLASS_HELD, call, f"`{func.id}` is called, but `{held.name}` has no "
                              "`__call__` the global style can follow")
            return self._method_call(call, held, held.methods["__call__"], self.kinds[func.id])
        if isinstance(func, ast.Name) and self._held_class(func.id) is not None:
            held = self._held_class(func.id)
            if getattr(self.module, "process_dependence", None) is not None:
                site = next(iter(held.sites.values()))
                raise Blocker(UNAVAILABLE, site.node, f"{site.label} is held by a class in a "
                              "multi-process module, where the global style follows module "
                              "functions only: kept in the faithful style (multi-process)")
            instance = Kind("instance", holder=held.name)
            init = held.methods.get("__init__")
            if init is not None:
                self._method_call(call, held, init, instance)
            return instance
        if isinstance(func, ast.Attribute) and is_super_call(func.value) \
                and isinstance(self.function, ast.FunctionDef) and self.function.args.args:
            me = self.kinds.get(self.function.args.args[0].arg, SAME)
            held = self._held_class(me.holder) if me.tag == "instance" else None
            if held is not None:  # `super().__init__(...)` in a method: the base's method
                return self._method_call(call, held, super_method(held.node, self.function, call),
                                         me)
        if isinstance(func, ast.Attribute):
            held = self._instance_of(func.value)
            if held is not None:
                if func.attr in held.sites:
                    return self._held_site_call(call, held, held.sites[func.attr])
                if is_property(held.methods.get(func.attr)):
                    raise Blocker(CLASS_HELD, call, f"`{ast.unparse(func)}(...)` calls what the "
                                  f"property `{held.name}.{func.attr}` gives, which the global "
                                  "style does not follow")
                if func.attr in held.methods:
                    return self._method_call(call, held, held.methods[func.attr],
                                             self.eval(func.value))
                raise Blocker(CLASS_HELD, call, f"`{ast.unparse(func)}` is not a method of "
                              f"`{held.name}` the global style can follow")
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            argument = argument.value if isinstance(argument, ast.Starred) else argument
            if isinstance(argument, ast.Name) \
                    and self.kinds.get(argument.id, SAME).tag == "instance":
                holder = self.kinds[argument.id].holder
                raise Blocker(CLASS_HELD, argument,
                              f"`{argument.id}`, a `{holder}` instance, escapes "
                              f"into `{ast.unparse(func)}(...)`, where its methods may be called "
                              "with layouts the global style does not see")
        return None

    def _instance_attribute(self, node: ast.Attribute) -> Kind | None:
        """`obj.attribute` of an instance: the attribute's joined kind."""
        held = self._instance_of(node.value)
        if held is None:
            return None
        if is_property(held.methods.get(node.attr)):  # reading it runs the method
            read = ast.copy_location(ast.Call(func=node, args=[], keywords=[]), node)
            return self._method_call(read, held, held.methods[node.attr], self.eval(node.value))
        if node.attr in held.sites or node.attr in held.methods:
            raise Blocker(CLASS_HELD, node, f"`{ast.unparse(node)}` (a method or pmap of "
                          f"`{held.name}`) is used as a value, so its calls are not all seen")
        _plain_attribute(node, held)
        key = (held.name, node.attr)
        self.instances.read.add(key)
        kind = self.instances.attributes.get(key, SAME)
        # An empty list read back is a plain value: a per-device value appended to it (or to
        # an alias of it) would not reach the attribute's kind, so that append is refused.
        return SAME if kind.tag == "empty_list" else kind

    def _instance_store(self, target: ast.Attribute, kind: Kind, value) -> bool:
        """`obj.attribute = value` on an instance: joined into the attribute's kind."""
        held = self._instance_of(target.value)
        if held is None:
            return False
        _plain_attribute(target, held)
        if target.attr in held.methods:
            raise Blocker(CLASS_HELD, target, f"`{ast.unparse(target)}` replaces a method of "
                          f"`{held.name}` on the instance, so its calls would not run the "
                          "method the global style follows")
        if isinstance(value, ast.Constant) and value.value is None:
            return True  # a placeholder: it holds no array of either layout
        key = (held.name, target.attr)
        old = self.instances.attributes.get(key)
        new = self._join(old, kind, f"{held.name}.{target.attr}", target)
        if new != old:
            self.instances.attributes[key] = new
            if key in self.instances.read:
                self.instances.dirty = True
        return True

    # -- calls -----------------------------------------------------------------------------
    def _method_call(self, call: ast.Call, held: HeldClass, method: ast.FunctionDef,
                     instance: Kind) -> Kind:
        """A method followed like a helper, with its arguments' kinds; its edits must be the
        same for every call (one text serves them all)."""
        key = (held.name, method.name, id(method))  # a base's method of the same name differs
        arguments = method.args
        if key in self.instances.active or self.depth >= 4:
            raise Blocker(CLASS_HELD, call,
                          f"`{held.name}.{method.name}` is called recursively or "
                          "too deep for the global style to follow")
        if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs \
                or not arguments.args or any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg is None for k in call.keywords):
            raise Blocker(CLASS_HELD, call, f"`{held.name}.{method.name}` has *args, **kwargs or "
                          "keyword-only parameters, or is called with * / **")
        names = [a.arg for a in arguments.args]
        parameters = {names[0]: instance}
        given = dict(zip(names[1:], call.args))
        given.update({k.arg: k.value for k in call.keywords})
        if len(call.args) > len(names) - 1 or set(given) - set(names[1:]):
            raise Blocker(CLASS_HELD, call,
                          f"`{held.name}.{method.name}` called with arguments it "
                          "does not take")
        for name, value in given.items():
            parameters[name] = self.eval(value)
        # The held sites this method builds (`__init__` or another method: classes.py; each
        # attribute is assigned once in the module).
        built = {s.targets[0].attr: s.value for s in method.body if isinstance(s, ast.Assign)
                 and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute)
                 and isinstance(s.targets[0].value, ast.Name)
                 and s.targets[0].value.id == names[0] and s.targets[0].attr in held.sites}
        builds = {id(value) for value in built.values()}
        analysis = type(self)(method, self.all_sites, self.module, parameters, self.depth + 1)
        analysis.sites, analysis.inline, analysis.local_builds = {}, {}, builds
        analysis.instances = self.instances
        self.instances.active.add(key)
        try:
            analysis.run_helper()
            self.instances.site_calls.update(analysis.site_calls)
            self.instances.produced.update(analysis.produced)
            if built:
                analysis._check_closures(held, method, set(built))
        finally:
            self.instances.active.discard(key)
        previous = self.instances.method_edits.setdefault(key, analysis.edits)
        if previous != analysis.edits:
            raise Blocker(PRODUCER_UNKNOWN, call,
                          f"`{held.name}.{method.name}` is called with different "
                          "layouts, and one migrated method cannot serve them all")
        self.edits.update(analysis.edits)
        self.stacked.update(analysis.stacked)
        for site_key, specs in analysis.specs.items():
            if self.specs.setdefault(site_key, specs) != specs:
                raise Blocker(PRODUCER_UNKNOWN, call,
                              f"{self.all_sites[site_key].label} is called with "
                              "different layouts")
        for site_key, mode in analysis.modes.items():
            if self.modes.setdefault(site_key, mode) != mode:
                raise Blocker(OUTPUT_NOT_REPLICATED, call,
                              f"{self.all_sites[site_key].label} returns "
                              "replicated results for some calls and per-device results for "
                              "others")
        result = None
        for node, kind in analysis.returns:
            result = self._join(result, kind, f"the result of {held.name}.{method.name}", node)
        return result or SAME

    def _held_site_call(self, call: ast.Call, held: HeldClass, site: Site) -> Kind:
        """`self.step(...)`: the site's call; a bound method's body may read only attributes
        whose layout the migration leaves as it is."""

        for method in reached_methods(site.body, held.node) if site.bound_self else ():
            me = method.args.args[0].arg  # the mapped method and those it runs through self
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == me and node.attr not in held.methods:
                    key = (held.name, node.attr)
                    self.instances.read.add(key)
                    kind = self.instances.attributes.get(key, SAME)
                    if kind.changed:
                        raise Blocker(CLASS_HELD, node, f"the method {site.label} maps reads "
                                      f"`{ast.unparse(node)}`, {describe(kind)} whose layout the "
                                      "migration changes")
        return self.site_call(call, site)

    def _built(self, statement: ast.Assign) -> None:
        """`self.x = jax.pmap(...)` / `self.x = make_step(...)` in `__init__`, where it stands:
        a factory takes plain values only, and `devices=` / `axis_size=` must be every device
        and the device count (read in `__init__`; a factory's only as calls without arguments)."""
        target = statement.targets[0]
        if self.instances is None or not isinstance(target, ast.Attribute):
            return
        site = next((s for s in self.all_sites.values() if s.holder and s.attribute == target.attr
                     and self.kinds.get(getattr(target.value, "id", ""), SAME).holder == s.holder),
                    None)
        if site is None:
            return
        value = statement.value
        if site.factory:
            for argument in [*value.args, *(k.value for k in value.keywords)]:
                kind = self.eval(argument)
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, argument,
                                  f"{describe(kind)} passed to the pmap "
                                  f"factory `{ast.unparse(value.func)}`")
        for option, node in site.placement.items():
            want = "devices" if option == "devices" else "devcount"
            kind = self.eval(node) if not site.factory or (
                isinstance(node, ast.Call) and not node.args and not node.keywords) else None
            if kind is None or kind.tag != want:
                what = "every device" if option == "devices" else "the device count"
                raise Blocker(OPTIONS, node, f"{site.label} has {option}=`{ast.unparse(node)}`, "
                              f"not provably {what}: under the caller's mesh over all devices "
                              "it would run on different devices")

    def _check_closures(self, held: HeldClass, method: ast.FunctionDef, attributes) -> None:
        """A function the held pmaps `attributes`, built in `method`, map (a lambda or a def
        nested in `method`) sees that method's locals as they end up: none of them may be a
        value whose layout the migration changes."""
        for site in held.sites.values():
            if site.factory or site.bound_self or site.attribute not in attributes:
                continue  # a factory's locals are not edited; `self` reads: _held_site_call
            seen = [site.function_node, *([site.body] if site.enclosing is method else [])]
            for node in (n for part in seen if part is not None for n in ast.walk(part)):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                        and self.kinds.get(node.id, SAME).changed:
                    raise Blocker(CLASS_HELD, node,
                                  f"`{node.id}` ({describe(self.kinds[node.id])}) "
                                  f"of `{method.name}` is closed over by the function {site.label} "
                                  "maps")


def _plain_attribute(node: ast.Attribute, held: HeldClass) -> None:
    """`__dict__`, `__class__` and the like reach every attribute at once, past their kinds."""
    if node.attr.startswith("__") and node.attr.endswith("__"):
        raise Blocker(CLASS_HELD, node,
                      f"`{ast.unparse(node)}` reaches the `{held.name}` instance's "
                      "attributes or class past the ones the global style follows")


def _holds_instance(kind: Kind) -> bool:
    return kind.tag == "instance" or any(_holds_instance(f) for _, f in kind.fields) or (
        kind.element is not None and _holds_instance(kind.element))
