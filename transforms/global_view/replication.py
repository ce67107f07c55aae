"""Which results of a pmap body are provably the same on every device.

With `out_specs=P()` and `check_vma=False` nothing checks that a result is replicated: a wrong
`P()` silently returns device 0's value. So a result counts as replicated only when the body's
own code shows it: it comes out of psum / pmean / pmax / pmin / all_gather over the site's
axis, or it is computed only from replicated parameters, module constants, and such values.
Anything device-dependent (the mapped parameters, axis_index, ppermute, all_to_all,
psum_scatter, axis_index_groups, functions imported from unknown modules) makes what it
touches "varying". The analysis is flow-sensitive over the body's statements and conservative
everywhere else: a statement it does not model makes the answer "not provable".
"""

from __future__ import annotations

import ast
import sys

from transforms.global_view.record_specs import RecordResult
from transforms.global_view.sites import Site, dotted

REDUCING = {f"jax.lax.{name}" for name in ("psum", "pmean", "pmax", "pmin", "all_gather")}
VARYING_PRIMITIVES = {
    "axis_index", "ppermute", "pshuffle", "all_to_all", "psum_scatter", "pswapaxes",
    "ragged_all_to_all", "pbroadcast", "pvary",
}
# Imports whose functions compute the same thing on every device from the same inputs.
PURE_MODULES = ("jax", "numpy", "math", "functools", "operator", "optax", "flax", "chex",
                "einops", "builtins")


class NotProvable(Exception):
    def __init__(self, node: ast.AST, why: str):
        super().__init__(why)
        self.node, self.why = node, why


class BodyAnalysis:
    """One site's body, with the module-level functions it may call."""

    def __init__(self, site: Site, module: ast.Module, imported: dict[str, str],
                 constants: dict[str, str] | None = None,
                 defs: dict[str, ast.FunctionDef] | None = None):
        """`defs`: the module's defs by name, when the caller has them (read, not copied)."""
        self.site = site
        self.imported = imported
        self.constants = {**(constants or {}), **site.constants}
        self.functions = defs if defs is not None else \
            {s.name: s for s in module.body if isinstance(s, ast.FunctionDef)}
        if site.enclosing is not None:  # a def nested in a factory or `__init__`: its siblings
            self.functions = {**self.functions, **{s.name: s for s in site.enclosing.body
                                                   if isinstance(s, ast.FunctionDef)}}
        self._function_varies: dict[str, bool] = {}
        # The methods of the module's classes by name: `obj.name(...)` may run any of them (the
        # object's class is not tracked), so it is device-dependent when one is.
        self.methods: dict[str, list[ast.FunctionDef]] = {}
        self.method_owners: dict[str, list[str]] = {}  # method name -> its classes' names
        for cls in (n for n in ast.walk(module) if isinstance(n, ast.ClassDef)):
            for member in cls.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.methods.setdefault(member.name, []).append(member)
                    self.method_owners.setdefault(member.name, []).append(cls.name)
        self._methods_varying: dict[str, bool] = {}
        # a followed method's `**kwargs`: the name -> {keyword: per-device} of the call's
        # extra keywords (`_method_record`)
        self._kwargs: dict[str, dict[str, bool]] = {}

    def first_varying_output(self, replicated_params: set[str],
                             records: dict | None = None) -> ast.AST | RecordResult | None:
        """None when every result is replicated given those parameters are; else the
        return (or statement) that is not provably replicated. `records`: parameters that
        are records with some fields per-device (name -> those fields); a body whose every
        return gives back one of them rebuilt (no field per-device that was not) answers
        with a `RecordResult`."""
        varying = self._entry(replicated_params, records)
        body = self.site.body
        try:
            if isinstance(body, ast.Lambda):
                return body.body if self.varies(body.body, varying) else None
            returns: list[tuple[ast.AST, bool]] = []
            self._block(body.body, varying, False, returns)
        except NotProvable as error:
            return error.node
        if records:
            found = {self._returned_record(node.value, names, control, records)
                     for node, _, names, control in returns if node.value is not None}
            if len(found) == 1 and None not in found and returns \
                    and all(node.value is not None for node, _, _, _ in returns):
                return found.pop()
        for node, varies, _, _ in returns:
            if varies:
                return node
        return None

    def _entry(self, replicated_params: set[str], records: dict | None) -> set[str]:
        """The varying names on entry: the parameters neither replicated nor records, and
        for a record parameter p `p:p` (a record rebuilt from p) and `p.f` per per-device
        field f (`_record_of`)."""
        records = records or {}
        varying = set(self.site.params) - replicated_params - set(records)
        for param, fields in records.items():
            varying |= {f"{param}:{param}", *(f"{param}.{f}" for f in fields)}
        return varying

    def _returned_record(self, value, names, control: bool, records: dict):
        found = None if control else self._record_of(value, set(names))
        if found is None or found[0] not in records or not found[1] <= set(records[found[0]]):
            return None
        return RecordResult(*found)

    def varying_results(self, replicated_params: set[str], keys, records: dict | None = None
                        ) -> dict:
        """For a body whose every return is a tuple literal of len(keys) results (keys
        0, 1, ...) or a dict literal with exactly the string keys `keys` (pmap's
        `out_axes=(0, None, ...)` / `{"k": 0, ...}`): per key, None when that result is
        provably replicated, a `RecordResult` where every return gives a record parameter
        back rebuilt (`records`, as in `first_varying_output`), else the node that is not.
        Raises NotProvable when a return is not such a literal."""
        varying = self._entry(replicated_params, records)
        body = self.site.body
        if isinstance(body, ast.Lambda):
            found = [(body.body, False, frozenset(varying), False)]
        else:
            found = []
            self._block(body.body, varying, False, found)
        outcomes: dict = {key: [] for key in keys}  # per return: (element, what it is)
        for node, _, names, control in found:
            value = node if isinstance(body, ast.Lambda) else node.value
            elements = result_elements(value, list(keys))
            if elements is None:
                raise NotProvable(node, "a return that is not a literal with one result per "
                                  "out_axes entry")
            for key, element in elements.items():
                record = self._returned_record(element, names, control, records) \
                    if records else None
                outcomes[key].append((element, record if record is not None else element
                                      if control or self.varies(element, set(names)) else None))
        results: dict = dict.fromkeys(keys)
        for key, seen in outcomes.items():
            kinds = {what for _, what in seen}
            if len(kinds) == 1 and isinstance(next(iter(kinds)), RecordResult):
                results[key] = kinds.pop()  # every return gives the record back so
            else:
                results[key] = next((element for element, what in seen if what is not None),
                                    None)
        return results


    # -- statements ---------------------------------------------------------------------
    def _block(self, statements, varying: set[str], control: bool, returns) -> set[str]:
        for statement in statements:
            varying = self._statement(statement, varying, control, returns)
        return varying

    def _statement(self, s, varying: set[str], control: bool, returns) -> set[str]:
        varying = set(varying)
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if s.value is None:
                return varying
            v = control or self.varies(s.value, varying)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            record = None if control or not isinstance(s, ast.Assign) or len(targets) != 1 \
                or not isinstance(targets[0], ast.Name) else self._record_of(s.value, varying)
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        strong = isinstance(target, (ast.Name, ast.Tuple, ast.List)) \
                            and not isinstance(s, ast.AugAssign)
                        was_record = _dropped_record(varying, node.id)
                        if v and record is None or was_record and not strong:
                            varying.add(node.id)
                        elif strong:
                            varying.discard(node.id)
            if record is not None:  # `new_state = state.replace(...)`: field by field
                name = targets[0].id
                varying |= {f"{name}:{record[0]}", *(f"{name}.{f}" for f in record[1])}
            return varying
        if isinstance(s, ast.Expr):
            if self.varies(s.value, varying) or control:
                for node in ast.walk(s.value):  # a mutating call: lst.append(v)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                        varying.add(node.value.id)
            return varying
        if isinstance(s, ast.Return):
            v = control or (s.value is not None and self.varies(s.value, varying))
            returns.append((s, v, frozenset(varying), control))
            return varying
        if isinstance(s, ast.If):
            inner = control or self.varies(s.test, varying)
            return self._block(s.body, varying, inner, returns) | self._block(
                s.orelse, varying, inner, returns)
        if isinstance(s, (ast.For, ast.While)):
            head = s.iter if isinstance(s, ast.For) else s.test
            inner = control or self.varies(head, varying)
            for _ in range(20):
                before = set(varying)
                if isinstance(s, ast.For):
                    for node in ast.walk(s.target):
                        if isinstance(node, ast.Name) and inner:
                            varying.add(node.id)
                varying |= self._block(s.body, varying, inner, returns)
                if varying == before:
                    break
            return varying | self._block(s.orelse, varying, control, returns)
        if isinstance(s, ast.With):
            for item in s.items:
                if self.varies(item.context_expr, varying):
                    raise NotProvable(s, "a with-statement over a device-dependent value")
            return self._block(s.body, varying, control, returns)
        if isinstance(s, ast.FunctionDef):
            if s.decorator_list and any(self.varies(d, varying) for d in s.decorator_list):
                varying.add(s.name)
            elif self._def_varies(s, varying):
                varying.add(s.name)
            else:
                varying.discard(s.name)
            return varying
        if isinstance(s, (ast.Pass, ast.Assert, ast.Raise, ast.Import, ast.ImportFrom)):
            return varying
        if isinstance(s, (ast.Break, ast.Continue)) and not control:
            return varying
        raise NotProvable(s, f"a {type(s).__name__} statement in the body")

    # -- expressions --------------------------------------------------------------------
    def varies(self, node: ast.AST, varying: set[str], bound: frozenset[str] = frozenset()) -> bool:
        if isinstance(node, ast.Call):
            if any(k.arg == "axis_index_groups" for k in node.keywords):
                return True
            if self._is_reduction(node):
                return False
            if self._calls_varying_method(node, bound):
                return True
        if isinstance(node, ast.Name):
            if node.id in bound:
                return False
            if node.id in varying:
                return True
            if _record_entries(varying, node.id) is not None:  # the whole record: any field
                return bool(_record_entries(varying, node.id)[1])
            return self._global_varies(node)
        if isinstance(node, ast.Attribute):
            if node.attr in VARYING_PRIMITIVES:
                return True
            if not dotted(node, self.imported) and self._method_varies(node.attr):
                return True  # `obj.name`, called or passed on (`jax.grad(self._loss)`)
            if isinstance(node.value, ast.Name) and node.value.id not in bound \
                    and node.value.id not in varying \
                    and _record_entries(varying, node.value.id) is not None \
                    and node.attr not in self.methods and node.attr not in _REBUILDS:
                return f"{node.value.id}.{node.attr}" in varying  # one field of a record
            return self.varies(node.value, varying, bound)
        if isinstance(node, ast.Lambda):
            inner = bound | {a.arg for a in node.args.args}
            return self.varies(node.body, varying, inner)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = set(bound)
            for generator in node.generators:
                if self.varies(generator.iter, varying, frozenset(inner)):
                    return True
                inner |= {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
                if any(self.varies(c, varying, frozenset(inner)) for c in generator.ifs):
                    return True
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            return any(self.varies(p, varying, frozenset(inner)) for p in parts)
        if isinstance(node, ast.NamedExpr):
            raise NotProvable(node, "an assignment expression in the body")
        return any(self.varies(child, varying, bound) for child in ast.iter_child_nodes(node))

    # -- records whose fields differ in layout (record_specs.py) ---------------------------
    def _record_of(self, node, varying: set[str], depth: int = 0):
        """(the record parameter it is rebuilt from, its per-device fields) of an expression
        that is such a record: a name holding one, `x.replace(f=v)` / `x._replace(f=v)` /
        `dataclasses.replace(x, f=v)` of one (field f per-device where v is), or a method of
        the module's one class defining it called on one (followed with `self` bound to
        it). None for anything else."""
        if isinstance(node, ast.Name):
            entries = None if node.id in varying else _record_entries(varying, node.id)
            return entries
        if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _REBUILDS and not node.args \
                or dotted(func, self.imported) == "dataclasses.replace" and len(node.args) == 1:
            base = self._record_of(func.value if not node.args else node.args[0], varying,
                                   depth)
            updates = {}  # field -> per-device
            for keyword in node.keywords:
                if keyword.arg is not None:
                    updates[keyword.arg] = self.varies(keyword.value, varying)
                elif isinstance(keyword.value, ast.Name) and keyword.value.id in self._kwargs:
                    updates.update(self._kwargs[keyword.value.id])  # a method's **kwargs
                else:
                    return None
            if base is None or not updates:
                return None
            fields = set(base[1]) - set(updates)
            fields |= {field for field, per_device in updates.items() if per_device}
            return base[0], frozenset(fields)
        if any(k.arg is None for k in node.keywords):
            return None
        if isinstance(func, ast.Attribute) and len(self.methods.get(func.attr, ())) == 1 \
                and depth < 4:
            receiver = self._record_of(func.value, varying, depth)
            return None if receiver is None else self._method_record(
                self.methods[func.attr][0], receiver, node, varying, depth)
        return None

    def _method_record(self, method, receiver, call: ast.Call, varying: set[str], depth: int):
        """What a plain method returns when called on a record: its returns' records rebuilt
        from `self`, with the call's arguments' layouts bound to its parameters."""
        arguments = method.args
        names = [a.arg for a in arguments.args]
        keyword_only = [a.arg for a in arguments.kwonlyargs]
        if method.decorator_list or arguments.vararg or arguments.posonlyargs or not names \
                or len(call.args) > len(names) - 1:
            return None
        given = dict(zip(names[1:], call.args)) | {k.arg: k.value for k in call.keywords}
        defaults = dict(zip(names[len(names) - len(arguments.defaults):], arguments.defaults))
        defaults |= {n: d for n, d in zip(keyword_only, arguments.kw_defaults) if d is not None}
        named = {*names[1:], *keyword_only}
        extra = {n: v for n, v in given.items() if n not in named}
        kwarg = arguments.kwarg.arg if arguments.kwarg else None
        rebound = kwarg is not None and any(
            isinstance(n, ast.Name) and n.id == kwarg and isinstance(n.ctx, ast.Store)
            for n in ast.walk(method))
        if extra and (kwarg is None or rebound) or named - set(given) - set(defaults):
            return None
        inner = {f"{names[0]}:{receiver[0]}", *(f"{names[0]}.{f}" for f in receiver[1])}
        inner |= {n for n, v in given.items() if n in named and self.varies(v, varying)}
        inner |= {n for n, v in defaults.items() if n not in given and self.varies(v, set())}
        outer = self._kwargs
        # `**kwargs` handed on to `.replace(**kwargs)` sets the fields the call's extra
        # keywords name (flax's `apply_gradients(self, *, grads, **kwargs)`)
        self._kwargs = {kwarg: {n: self.varies(v, varying) for n, v in extra.items()}} \
            if kwarg is not None else {}
        returns: list = []
        try:
            self._block(method.body, inner, False, returns)
            found = {None if control or node.value is None else
                     self._record_of(node.value, set(names_there), depth + 1)
                     for node, _, names_there, control in returns}
        except NotProvable:
            return None
        finally:
            self._kwargs = outer
        if len(found) != 1 or None in found or not returns:
            return None
        base, fields = found.pop()
        return (base, fields) if base == receiver[0] else None

    def cause(self, node: ast.AST) -> str:
        """Why `node` (a result `varies` found device-dependent) is not provably replicated,
        in words for a finding: a method of the module's classes it calls that reads the device
        (`state.apply_gradients(...)` of a class whose `apply_gradients` reads `axis_index`),
        else the general reason."""
        for child in ast.walk(node):
            if isinstance(child, ast.Attribute) and not dotted(child, self.imported) \
                    and child.attr in self.methods and self._method_varies(child.attr):
                owners = ", ".join(f"`{owner}.{child.attr}`"
                                   for owner in self.method_owners[child.attr])
                return (f"`{ast.unparse(child)}` may run {owners} (line "
                        f"{self.methods[child.attr][0].lineno}), which computes a "
                        "device-dependent value")
        return "it is computed from a per-device value"

    def _is_reduction(self, call: ast.Call) -> bool:
        if dotted(call.func, self.imported) not in REDUCING:
            return False
        axis = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "axis_name"), None)
        if isinstance(axis, (ast.Name, ast.Attribute)):  # AXIS, Cfg.axis
            return self.site.axis_name is not None and \
                self.constants.get(ast.unparse(axis)) == self.site.axis_name
        return isinstance(axis, ast.Constant) and axis.value == self.site.axis_name is not None

    def _calls_varying_method(self, call: ast.Call, bound: frozenset[str]) -> bool:
        """`obj(...)` of an object whose class may be one of the module's with a `__call__`
        that reads the device (`obj.name` itself: `_method_varies` where `varies` meets it)."""
        func = call.func
        return isinstance(func, ast.Name) and func.id not in self.functions \
            and func.id not in self.imported and func.id not in bound \
            and self._method_varies("__call__")

    def _method_varies(self, name: str) -> bool:
        """A class of the module defines a method `name` whose code reads the device
        (`jax.lax.axis_index`, ...): the class of an object is not tracked, so `obj.name`
        may run it, and what it gives is device-dependent even from replicated arguments."""
        if name not in self._methods_varying:
            self._methods_varying[name] = True  # recursion: assume the worst
            self._methods_varying[name] = any(self._def_varies(m, set())
                                              for m in self.methods.get(name, ()))
        return self._methods_varying[name]

    def _global_varies(self, name: ast.Name) -> bool:
        """A module-level name: an import from an unknown module, or a module function that
        may compute something device-dependent."""
        if name.id in self.imported:
            root = self.imported[name.id].split(".")[0]
            # The standard library cannot read a device's identity: traced once for every
            # device, its functions give replicated values from replicated arguments.
            return root not in PURE_MODULES and root not in sys.stdlib_module_names
        if name.id in self.functions:
            return self._module_function_varies(name.id)
        return False  # a constant, a builtin, a class

    def _module_function_varies(self, function: str) -> bool:
        if function not in self._function_varies:
            self._function_varies[function] = True  # recursion: assume the worst
            self._function_varies[function] = self._def_varies(self.functions[function], set())
        return self._function_varies[function]

    def _def_varies(self, definition: ast.FunctionDef, varying: set[str]) -> bool:
        params = frozenset(a.arg for a in ast.walk(definition.args) if isinstance(a, ast.arg))
        return any(self.varies(statement, varying - params, params)
                   for statement in definition.body)


_REBUILDS = ("replace", "_replace")  # flax struct's / NamedTuple's copy with fields replaced


def _record_entries(varying: set[str], name: str) -> tuple[str, frozenset] | None:
    """(the record parameter `name` is rebuilt from, its per-device fields) where the
    varying set says `name` holds a record (`name:param`, `name.field`); None otherwise, and
    where two paths rebuilt it from different parameters."""
    bases = {e.split(":", 1)[1] for e in varying if e.startswith(f"{name}:")}
    if len(bases) != 1:
        return None
    fields = frozenset(e[len(name) + 1:] for e in varying if e.startswith(f"{name}."))
    return bases.pop(), fields


def _dropped_record(varying: set[str], name: str) -> bool:
    """Forget what the varying set says of `name`'s fields (it is bound again); whether it
    said anything."""
    entries = {e for e in varying if e.startswith((f"{name}:", f"{name}."))}
    varying -= entries
    return bool(entries)


def result_elements(value, keys: list) -> dict | None:
    """key -> the result expression of a returned tuple (keys 0..n-1) or dict literal whose
    keys are exactly `keys`; None for any other return value."""
    if isinstance(value, ast.Tuple) and keys == list(range(len(value.elts))) \
            and not any(isinstance(e, ast.Starred) for e in value.elts):
        return dict(enumerate(value.elts))
    if isinstance(value, ast.Dict) and all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
        found = {k.value: v for k, v in zip(value.keys, value.values)}
        if sorted(found) == sorted(keys) and len(found) == len(value.keys):
            return found
    return None
