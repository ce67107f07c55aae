"""The statements of a caller of global sites: how each one changes the kinds of its local
names (assignments and unpacking, loops iterated until their kinds settle, branches joined,
list appends, a followed generator's yields), and the constructs no per-device value may
reach. A mixin of `CallerAnalysis` (dataflow.py holds the state it reads and `_join`)."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN, CONSUMER_UNKNOWN
from transforms.global_view.interpreter import StatementInterpreter
from transforms.global_view.sites import Blocker
from transforms.global_view.values import SAME, Kind, describe, list_of, origins


class StatementsMixin(StatementInterpreter):
    """`CallerAnalysis`'s reading of statements, one binding at a time. The walk itself is
    interpreter.py's, with its default policies: loops to a fixpoint of at most 8 rounds,
    break / continue not tracked, try handlers from the entry state; each round drops the
    edits made within the loop, so only the settled iteration's remain."""

    def _assign(self, name: str, kind: Kind, node: ast.AST) -> None:
        """A binding: flow-sensitive, so `params = replicate(params)` is two values."""
        if name in self.loaded:  # a name never read (`_`) may hold anything
            self.kinds[name] = kind
        if kind.changed:
            self.assigned_changed.setdefault(name, kind)

    # -- the hooks of the shared walk (interpreter.py) -------------------------------------
    def _snapshot(self) -> dict:
        return dict(self.kinds)

    def _restore(self, state: dict) -> None:
        self.kinds = dict(state)

    def _join_states(self, a: dict, b: dict, node) -> dict:
        # In name order: which conflict is raised first must not depend on string hashing.
        return {name: self._join(a.get(name), b.get(name), name, node)
                for name in sorted({*a, *b})}

    def _round_start(self, s) -> None:
        """Only the settled iteration's edits are kept: drop those made within the loop."""
        span = self.module.span(s)
        for key in [k for k in self.edits if span[0] <= k[0] and k[1] <= span[1]]:
            del self.edits[key]

    def _unsettled(self, s) -> Blocker:
        return Blocker(CONSUMER_UNKNOWN, s, "the values of this loop do not settle")

    def _assign_statement(self, s) -> None:
        if isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self._bind(s.target, self.eval(s.value), s.value)
            return
        if id(s.value) in self.local_builds:
            self._built(s)
            return  # `p = jax.pmap(...)`: p is a site of this function
        for target in s.targets:  # only for findings: what a name was last built by
            if isinstance(target, ast.Name):
                self.producers[target.id] = s.value
        kind = self.eval(s.value)
        for target in s.targets:
            self._bind(target, kind, s.value)

    def _aug_assign_statement(self, s) -> None:
        if self.eval(s.value).changed or self.eval(s.target).changed:
            raise Blocker(CONSUMER_UNKNOWN, s, "an augmented assignment on a per-device value")

    def _loop_head(self, s):
        """What each iteration starts with: the target bound (evaluating the iterable
        anew), or the while test."""
        if isinstance(s, ast.While):
            return lambda: self._test(s.test)

        def head():
            iterated = self.eval(s.iter)
            element = self.element(iterated)
            if element is not None:
                self._bind(s.target, element, s.iter)
            elif iterated.changed:
                raise Blocker(CONSUMER_UNKNOWN, s.iter, "a loop over the device axis")
            else:
                self._bind(s.target, SAME, s.iter)
        return head

    def _test(self, node) -> None:
        if self.eval(node).tag in ("list", "empty_list"):
            # `while queue:`, `if tree_leaves(state.model_state):`: a list's truth is its
            # length, a host value, the same whatever the layout of its elements
            return
        self._same(node)

    def _known_test(self, test) -> bool | None:
        """`if max_devices_per_host:` of a parameter every call leaves None is false."""
        return False if self._still_none(test) else None

    def _with_item(self, item: ast.withitem) -> None:
        self._same(item.context_expr)
        if item.optional_vars is not None:
            self._bind(item.optional_vars, SAME, item.context_expr)

    def _return_statement(self, s: ast.Return) -> None:
        self.returns.append((s, self.eval(s.value) if s.value is not None else SAME))

    def _unmodelled(self, s) -> None:
        self._opaque(s)

    def _bind(self, target, kind: Kind, value) -> None:
        if isinstance(target, ast.Name):
            self._assign(target.id, kind, target)
        elif isinstance(target, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Starred) for e in target.elts):
            # `key, *rest = random.split(key, 3)`: only plain values; a starred name gets a
            # list of the parts, which no layout here describes
            elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else []
            if kind.changed or any(self.eval(e).changed for e in elements):
                raise Blocker(CONSUMER_UNKNOWN, target,
                              f"unpacking {describe(kind)} into a starred target")
            for element_target in target.elts:
                self._bind(element_target.value if isinstance(element_target, ast.Starred)
                           else element_target, SAME, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for element_target, element in zip(target.elts, value.elts):
                    self._bind(element_target, self.eval(element), element)
            elif kind.tag == "fields" and [k for k, _ in kind.fields] == [
                    f"[{i}]" for i in range(len(target.elts))]:
                for element_target, (_, field) in zip(target.elts, kind.fields):
                    self._bind(element_target, field, value)
            elif kind.tag in ("same", "repl"):  # unpacking a tuple output of a global step
                for element_target in target.elts:
                    self._bind(element_target, kind, value)
            else:
                raise Blocker(CONSUMER_UNKNOWN, target, f"unpacking {describe(kind)}")
        elif isinstance(target, ast.Attribute) and self._instance_store(target, kind, value):
            pass
        elif self._stored_in_its_layout(target, kind):
            pass
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            if kind.changed or self.eval(target.value).changed:
                # the stored value's producers may keep pmap's layout instead (the fallback
                # reads the target's names only: a container's, not the value's)
                raise Blocker(CONSUMER_UNKNOWN, target,
                              "a per-device value stored into a container "
                              "or attribute", origins=origins(kind))
        else:
            raise Blocker(CONSUMER_UNKNOWN, target,
                          "an assignment target the global style does not model")

    def _stored_in_its_layout(self, target, kind: Kind) -> bool:
        """`tree["key"] = value` where `tree` (a name) and `value` have one layout: both
        replicated on the same axis, or both pmap's stacked rows. The tree keeps it, whatever
        else holds it (scenic's `new_model_state["batch_stats"] = pmap_mean(...)` into
        `dict(train_state.model_state)`)."""
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)):
            return False
        tree = self.kinds.get(target.value.id)
        if tree is None:
            return False
        if tree.tag == kind.tag == "repl" and tree.axis == kind.axis:
            self.kinds[target.value.id] = Kind("repl", tree.axis, tree=True,
                                               origin=tree.origin | kind.origin)
            return True
        return tree.rows and kind.rows and not tree.changed and not kind.changed

    def _expression_statement(self, value) -> None:
        call = value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
                and len(call.args) == 1 and not call.keywords
                and self.kinds.get(call.func.value.id, SAME).tag in ("empty_list", "list", "same")):
            name = call.func.value.id
            element = self.eval(call.args[0])
            if element.changed and self.kinds.get(name, SAME).tag == "same" and \
                    name not in self.kinds:
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is not a list made in this function")
            if name in self.kinds:
                self.kinds[name] = self._join(self.kinds[name], list_of(element), name, call)
            elif element.changed:
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is not a list made in this function")
            return
        if isinstance(value, ast.YieldFrom) and self.depth:
            # `yield from it` hands out the elements of `it`, one by one
            self.yields.append((value, self._element_of(value.value)))
            return
        if isinstance(value, ast.Yield) and self.depth and value.value is not None:
            yielded = value.value  # a tuple literal stays a tuple: `x, y = next(batches)`
            kind = self._tuple_fields(yielded) if isinstance(yielded, ast.Tuple) else self.eval(yielded)
            self.yields.append((value, kind))
            return
        self.eval(value)

    def _tuple_fields(self, node: ast.Tuple) -> Kind:
        kinds = [self.eval(e) for e in node.elts]
        if any(isinstance(e, ast.Starred) for e in node.elts) or not any(k.changed for k in kinds):
            return self.eval(node)
        return Kind("fields", fields=tuple((f"[{i}]", k) for i, k in enumerate(kinds)))

    def _same(self, node) -> None:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"{describe(kind)} used in a condition or context")

    def _opaque(self, node) -> None:
        """A construct this module does not model: fine only if no per-device value or
        site reaches it."""
        for child in ast.walk(node):
            if isinstance(child, ast.Call) and id(child.func) in self.inline:
                raise Blocker(CALLERS_UNSEEN, child, "a pmap called on the spot in a construct "
                              f"the global style does not follow (a {type(node).__name__})",
                              site=self.inline[id(child.func)].key)
            if isinstance(child, ast.Name):
                if self.site_read(child) is not None:
                    raise Blocker(CALLERS_UNSEEN, child, f"`{child.id}` used in a construct the "
                                  "global style does not follow", site=self.sites[child.id].key)
                if self.kinds.get(child.id, SAME).changed:
                    raise Blocker(CONSUMER_UNKNOWN, child,
                                  f"`{child.id}` ({describe(self.kinds[child.id])})"
                                  f" used in a {type(node).__name__}")
