"""Records whose fields differ in layout: a dataclass, NamedTuple or flax struct (a pytree
with named fields) that is replicated as a whole and then has some fields replaced
(`replicate(state).replace(dropout_rng=shard_prng_key(key))`: every field a replicated stack
but the keys, one per device).

The rule: `x.replace(f=v)` (flax's struct dataclasses), `x._replace(f=v)` and
`dataclasses.replace(x, f=v)` give x with field f replaced, so each field keeps its own
layout: the ones named take their value's, every other one x's. A `record` Kind holds the
fields named (`fields`) and the layout of the rest (`element`); `x.f` reads one. A method of
a class of this module, called on an instance a constructor of that class made (`C(...)` or
a classmethod returning `cls(...)`), is followed with its arguments' kinds, as a helper is,
so a record its `replicate()` method builds is seen where the method is called.

A mixin of `CallerAnalysis` (dataflow.py holds the state it reads)."""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import CONSUMER_UNKNOWN, PRODUCER_UNKNOWN
from transforms.global_view.record_specs import record_spec
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import SAME, Kind, describe

# How deep methods are followed from one another (a bound on the work, not a rule).
_MAX_METHOD_DEPTH = 4


class RecordsMixin:
    """`CallerAnalysis`'s records of fields of mixed layouts, and the methods of the module's
    own classes called on their instances."""

    # -- `.replace(f=v)` ------------------------------------------------------------------
    def _rebuilt_record(self, call: ast.Call, func, name: str) -> Kind | None:
        """`x.replace(f=v, ...)`, `x._replace(...)`, `dataclasses.replace(x, ...)` of a
        replicated tree or a record, with keywords only: a record of x's fields with those
        replaced (a replicated tree again when every field is replicated). None for any
        other call."""
        if any(k.arg is None for k in call.keywords) or not call.keywords:
            return None
        if name == "dataclasses.replace" and len(call.args) == 1:
            base = call.args[0]
        elif isinstance(func, ast.Attribute) and func.attr in ("replace", "_replace") \
                and not call.args:
            base = func.value
        else:
            return None
        kind = self.eval(base)
        # how the program rebuilds it (the spec of its fields is written so: record_specs.py)
        form = ast.unparse(call.func) if name == "dataclasses.replace" else func.attr
        if kind.tag == "record":
            fields, rest, lines = dict(kind.fields), kind.element, dict(kind.lines)
            form = form if kind.holder == form else ""  # two forms: which type is it?
        elif kind.tag == "repl" and kind.axis == 0:
            fields, rest, lines = {}, kind, {}
        else:
            return None
        for keyword in call.keywords:
            fields[keyword.arg] = self.eval(keyword.value)
            lines[keyword.arg] = keyword.value.lineno
        differing = {f: k for f, k in fields.items() if k != rest}
        if all(k.tag == "repl" and k.axis == 0 for k in (rest, *differing.values())):
            # every field replicated: a replicated tree, of a shape its code may not show
            return Kind("repl", tree=True, origin=rest.origin.union(
                *(k.origin for k in differing.values())))
        if not differing:
            return rest
        return Kind("record", fields=tuple(sorted(differing.items())), element=rest,
                    lines=tuple(sorted(lines.items())), holder=form,
                    origin=kind.origin.union(*(k.origin for k in differing.values())))

    def _record_field(self, node: ast.Attribute, kind: Kind) -> Kind:
        """`x.f` of a record: the field's own kind. A method (`x.apply_gradients`) reads the
        whole record; it is followed only where the record's class is known."""
        if self._called(node) or node.attr.startswith("_"):
            raise Blocker(CONSUMER_UNKNOWN, node, f"`{ast.unparse(node)}(...)`: a method of "
                          f"{describe(kind)}, which the global style does not follow")
        return dict(kind.fields).get(node.attr, kind.element)

    # -- the module's own classes -----------------------------------------------------------
    def _module_class(self, name: str) -> ast.ClassDef | None:
        classes = self.__dict__.get("_module_classes")
        if classes is None:
            bound_twice = {n for n, count in _top_level_bindings(self.module.tree).items()
                           if count > 1}
            classes = self._module_classes = {
                s.name: s for s in self.module.tree.body
                if isinstance(s, ast.ClassDef) and s.name not in bound_twice}
        return classes.get(name)

    def _constructed(self, call: ast.Call) -> str | None:
        """The module class whose instance `call` makes: `C(...)`, or `C.m(...)` for a
        classmethod m whose every return is `cls(...)`. None for any other call."""
        func = call.func
        if isinstance(func, ast.Name):
            return func.id if self._module_class(func.id) is not None \
                and func.id not in self.kinds else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id not in self.kinds:
            cls = self._module_class(func.value.id)
            method = _method(cls, func.attr) if cls is not None else None
            if method is not None and _decorators(method) == ["classmethod"] \
                    and method.args.args:
                first = method.args.args[0].arg
                returns = [n for n in ast.walk(method) if isinstance(n, ast.Return)]
                if returns and all(isinstance(r.value, ast.Call)
                                   and isinstance(r.value.func, ast.Name)
                                   and r.value.func.id in (first, cls.name) for r in returns):
                    return cls.name
        return None

    def _class_method_call(self, call: ast.Call) -> Kind | None:
        """`obj.m(...)` where obj is an instance of a module class (a constructor made it)
        and m a plain method of that class: followed with self bound to obj's kind and its
        parameters to the arguments' kinds; its edits must not reach code other calls of it
        run. A constructor's own call gives a plain value of that class. None otherwise."""
        made = self._constructed(call)
        if made is not None:
            for argument in [*call.args, *(k.value for k in call.keywords)]:
                self._need_same(argument.value if isinstance(argument, ast.Starred)
                                else argument)
            return Kind("same", holder=made)
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        # Only a name holding an instance, or a constructor's call: any other receiver is
        # read where the call is read as before (evaluating it here would read it twice).
        if isinstance(func.value, ast.Name):
            receiver = self.kinds.get(func.value.id, SAME)
        elif isinstance(func.value, ast.Call) and self._constructed(func.value) is not None:
            receiver = self.eval(func.value)
        else:
            return None
        cls = self._module_class(receiver.holder) if receiver.tag == "same" \
            and receiver.holder else None
        method = _method(cls, func.attr) if cls is not None else None
        if method is None or method.decorator_list:
            return None
        arguments = method.args
        names = [a.arg for a in arguments.args]
        given = dict(zip(names[1:], call.args))
        given.update({k.arg: k.value for k in call.keywords})
        required = names[1:len(names) - len(arguments.defaults)]
        if (arguments.vararg or arguments.kwarg or arguments.kwonlyargs
                or arguments.posonlyargs or not names
                or any(isinstance(a, ast.Starred) for a in call.args)
                or any(k.arg is None for k in call.keywords)
                or len(call.args) > len(names) - 1 or set(given) - set(names[1:])
                or set(required) - set(given)):
            return None  # a call the method would refuse, or one not read here
        key = f"{cls.name}.{method.name}"
        if key in self.chain or self.depth >= _MAX_METHOD_DEPTH:
            raise Blocker(CONSUMER_UNKNOWN, call, f"`{key}` is called recursively or too deep "
                          "for the global style to follow")
        parameters = {names[0]: receiver}
        parameters.update((n, self.eval(v)) for n, v in given.items())
        analysis = type(self)(method, self.all_sites, self.module, parameters, self.depth + 1)
        analysis.chain = self.chain | {self.function.name, key}
        analysis.sites, analysis.inline, analysis.local_builds = {}, {}, set()
        analysis.keep_stacked = self.keep_stacked
        analysis.helper_edits, analysis.followed_calls = self.helper_edits, self.followed_calls
        for flag in ("merge_outputs", "split_results"):
            setattr(analysis, flag, getattr(self, flag))
        analysis.run_helper()
        start, end = self.module.span(method)
        own = {span: text for span, text in analysis.edits.items()
               if start <= span[0] and span[1] <= end}
        if own and self._method_reads(method.name) > 1:
            raise Blocker(CONSUMER_UNKNOWN, call, f"`{key}` would be rewritten for the "
                          "per-device values this call passes, but the module reads "
                          f"`.{method.name}` elsewhere too, where it must stay as it is")
        if analysis.site_calls:
            raise Blocker(CONSUMER_UNKNOWN, call, f"`{key}` calls pmap sites itself, which "
                          "the global style follows only in module functions")
        self.edits.update(analysis.edits)
        result = None
        for node, kind in analysis.returns:
            result = self._join(result, kind, f"the result of {key}", node)
        if result is None or not result.changed and not result.rows:
            return SAME
        return result

    def _method_reads(self, name: str) -> int:
        """How many `.name` attributes the module reads (a method's uses, by its name)."""
        return sum(isinstance(n, ast.Attribute) and n.attr == name
                   for n in ast.walk(self.module.tree))

    # -- a record as a step's argument ------------------------------------------------------
    def _record_spec(self, argument, kind: Kind, what: str, site: Site | None, axis=0) -> str:
        """The in_specs of a record reaching a step (record_specs.py): P() on its replicated
        fields, P(axis) on those with one row per device. A field the analysis does not know
        along pmap's device axis, a field of another layout (a batch), or a step that cannot
        be given the spec (the def that builds it, the squeeze in its body) keeps pmap's
        calling contract, with a finding that names the fields and the lines that set them."""
        lines = dict(kind.lines)
        parts = []
        for field, field_kind in kind.fields:
            where = f", set at line {lines[field]}" if field in lines else ""
            if not field_kind.changed and not field_kind.rows:
                raise Blocker(PRODUCER_UNKNOWN, argument, f"{what} (`{ast.unparse(argument)}`): "
                              f"its field `{field}` ({describe(field_kind)}{where}) has no "
                              "layout the analysis knows along pmap's device axis (the "
                              f"record's other fields: {_layout_words(kind.element)})")
            parts.append(f"`{field}` {_layout_words(field_kind)}{where}")
        mixed = f"{what} (`{ast.unparse(argument)}`) has fields of mixed layout " \
            f"({'; '.join(parts)}; the others {_layout_words(kind.element)})"
        if not self.record_specs:  # the caller failed with them (dataflow.run): why, short
            fields = "; ".join(f"`{field}` {_layout_words(k)}" for field, k in kind.fields)
            raise Blocker(PRODUCER_UNKNOWN, argument, f"{what} (`{ast.unparse(argument)}`), a "
                          f"record ({fields}; the others {_layout_words(kind.element)}): "
                          f"{self.records_refused}")
        why = f"its in_axes is {axis!r}, not 0" if axis != 0 else \
            self._record_spec_refused(kind, site)
        if why:
            raise Blocker(PRODUCER_UNKNOWN, argument, f"{mixed}: {why}")
        if self.record_log is not None:
            self.record_log.append(argument)
        return record_spec(kind.holder, [field for field, _ in kind.fields])

    def _record_spec_refused(self, kind: Kind, site: Site | None) -> str | None:
        """Why a record's per-field spec cannot be written for `site`, if it cannot."""
        if not (kind.element.tag == "repl" and kind.element.axis == 0) or not all(
                k.tag == "same" and k.rows for _, k in kind.fields):
            return "only replicated fields and one-row-per-device fields get specs per field"
        if not kind.holder or kind.holder not in ("replace", "_replace") and \
                kind.holder.split(".")[0] not in self.module.imported:
            return "it is rebuilt by calls of different kinds"
        statement = site.statement if site is not None else None
        if site is None or site.owner is None or site.decorated or site.holder or site.factory \
                or site.inline \
                or site.opaque or site.rebinds is not None or site.keyword_params \
                or site.replaced is not None or not isinstance(site.body, ast.FunctionDef) \
                or not isinstance(statement, ast.Assign) or statement.value is not site.node \
                or [ast.unparse(t) for t in statement.targets] != [site.name]:
            return "only a step built as `name = jax.pmap(f, ...)` in a function gets specs " \
                "per field"
        if not (self.stacked_arguments and self.module.can_stack_results(site)
                and self.module.starts_a_line(site.body)):
            return "its body, shared with other code, cannot squeeze the per-device fields"
        return None


def _layout_words(kind: Kind) -> str:
    if kind.rows:
        return "per-device"
    return {"repl": "replicated", "merged": "a per-device batch"}.get(kind.tag, describe(kind))


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    found = [s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name]
    rebound = any(isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == name
        for t in (s.targets if isinstance(s, ast.Assign) else [s.target])) for s in cls.body)
    return found[0] if len(found) == 1 and not rebound else None


def _decorators(function: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in function.decorator_list]


def _top_level_bindings(tree: ast.Module) -> dict[str, int]:
    counts: dict[str, int] = {}
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[statement.name] = counts.get(statement.name, 0) + 1
        for node in ast.walk(statement) if isinstance(statement, (ast.Assign, ast.AnnAssign,
                                                                  ast.AugAssign, ast.For,
                                                                  ast.Import, ast.ImportFrom))\
                else ():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                counts[node.id] = counts.get(node.id, 0) + 1
            elif isinstance(node, ast.alias):
                bound = node.asname or node.name.split(".")[0]
                counts[bound] = counts.get(bound, 0) + 1
    return counts
