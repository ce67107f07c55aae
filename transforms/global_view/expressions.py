"""Expressions in a caller of global sites: what kind of value each one is (`eval`),
subscripts, arithmetic, containers, comprehensions. Calls are call_kinds.py, and the calls of
the sites themselves site_calls.py."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN, CONSUMER_UNKNOWN
from transforms.global_view.sites import Blocker, dotted
from transforms.global_view.stacked_rows import (
    basic_index,
    broadcast_rows,
    indexed_rows,
    shape_lead,
)
from transforms.global_view.values import (
    ARRAY_ATTRIBUTES,
    NUMBER,
    ROWS,
    SAME,
    Kind,
    describe,
    least_rank,
    list_of,
)


class ExpressionsMixin:
    """`CallerAnalysis`'s evaluation of expressions (dataflow.py holds the state it reads)."""

    def _called(self, node) -> bool:
        """`node` is the function of a call in this function (`state.replace(...)`: a method,
        which the analysis does not follow, not a field)."""
        funcs = self.__dict__.get("_call_funcs")
        if funcs is None:
            funcs = self._call_funcs = {id(n.func) for n in ast.walk(self.function)
                                        if isinstance(n, ast.Call)}
        return id(node) in funcs

    def _still_none(self, node) -> bool:
        """`node` names a parameter every call leaves None (a followed helper's, or a caller's
        that no call passes: `defaulted_none`), read in a top-level statement of the function
        before anything stores to it (so run once, with the default)."""
        if not (isinstance(node, ast.Name) and node.id in self.defaulted_none):
            return False
        for statement in self.function.body:
            if isinstance(statement, ast.If) and statement.test is node:
                return True  # `if max_devices_per_host:`, read before any store
            if any(n is node for n in ast.walk(statement)):
                return isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return))
            if any(isinstance(n, ast.Name) and n.id == node.id
                   and not isinstance(n.ctx, ast.Load) for n in ast.walk(statement)):
                return False
        return False

    def _none_default(self, node) -> ast.expr | None:
        """Of `x if p is None else p` (or `p if p is not None else x`), where `p` is a
        parameter every call leaves None (`_still_none`): `x`, the value it takes. The same
        default as `p or x`, written out. None for any other expression."""
        if not (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1 and isinstance(node.test.comparators[0], ast.Constant)
                and node.test.comparators[0].value is None):
            return None
        tested, op = node.test.left, node.test.ops[0]
        if not isinstance(tested, ast.Name):
            return None
        default, kept = (node.body, node.orelse) if isinstance(op, ast.Is) else (
            (node.orelse, node.body) if isinstance(op, ast.IsNot) else (None, None))
        if default is None or not (isinstance(kept, ast.Name) and kept.id == tested.id):
            return None
        return default if self._still_none(tested) else None

    def named_function(self, node) -> tuple[ast.stmt, ast.arguments, list, ast.AST] | None:
        """The function behind a name this function reads once and binds once, in its own
        body: `f = lambda x: ...`, or an undecorated def whose body ends in a return. A
        function written once and used once is the same as one written where it is used (a
        closure reads its free names when called, as code in place would). Gives (the
        statement that binds it, its arguments, the statements before its return, the
        returned value)."""
        if not isinstance(node, ast.Name):
            return None
        name, loads, stores = node.id, 0, 0
        for n in ast.walk(self.function):
            if isinstance(n, ast.Name) and n.id == name:
                loads, stores = (loads + 1, stores) if isinstance(n.ctx, ast.Load) \
                    else (loads, stores + 1)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and n.name == name and n is not self.function:
                stores += 1
            elif isinstance(n, ast.arg) and n.arg == name \
                    or isinstance(n, ast.ExceptHandler) and n.name == name:
                stores += 1
            elif isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                    (a.asname or a.name.split(".")[0]) == name for a in n.names):
                stores += 1
            elif isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
                return None
        if loads != 1 or stores != 1:
            return None
        for statement in self.function.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == name \
                    and not statement.decorator_list:
                body = statement.body
                if body and isinstance(body[0], ast.Expr) \
                        and isinstance(body[0].value, ast.Constant):
                    body = body[1:]
                if body and isinstance(body[-1], ast.Return) and body[-1].value is not None:
                    return statement, statement.args, body[:-1], body[-1].value
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) \
                    and statement.targets[0].id == name and isinstance(statement.value, ast.Lambda):
                return statement, statement.value.args, [], statement.value.body
        return None

    def lambda_of(self, node) -> tuple[ast.Lambda | None, ast.stmt | None]:
        """`node` as a lambda: itself, or the lambda a name read once is bound to
        (`named_function`), with the statement that binds it."""
        if isinstance(node, ast.Lambda):
            return node, None
        named = self.named_function(node)
        if named is None or named[2]:
            return None, None
        statement, arguments, _, value = named
        if isinstance(statement, ast.Assign):
            return statement.value, statement
        # `def first(x): return x[0]` is `lambda x: x[0]`
        return ast.copy_location(ast.Lambda(args=arguments, body=value), statement), statement

    def cut_statement(self, statement: ast.stmt) -> None:
        """Remove `statement`'s lines (a binding the migration left unread), where it has
        its lines to itself."""
        starts, source = self.module.line_starts, self.module.source
        start, end = self.module.span(statement)
        line_start = starts[statement.lineno - 1]
        line_end = starts[statement.end_lineno] if statement.end_lineno < len(starts) \
            else len(source)
        if source[line_start:start].strip() or source[end:line_end].strip():
            return
        following = starts[statement.end_lineno + 1] if statement.end_lineno + 1 < len(starts) \
            else len(source)
        if statement.lineno > 1 and not source[starts[statement.lineno - 2]:line_start].strip() \
                and not source[line_end:following].strip():
            line_end = following  # one blank line of the two around it goes too
        self._edit_span(line_start, line_end, "")

    # -- expressions ----------------------------------------------------------------------
    def eval(self, node) -> Kind:
        if isinstance(node, ast.Constant):
            return Kind("same", rank=0) if type(node.value) in (int, float, bool) else SAME
        if isinstance(node, ast.Name):
            if self.site_read(node) is not None:
                # Only this site falls back (to pmap's contract, which any use keeps).
                raise Blocker(CALLERS_UNSEEN, node, f"`{node.id}` used as a value, not called",
                              site=self.sites[node.id].key)
            return self.kinds.get(node.id, SAME)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Attribute):
            held = self._instance_attribute(node)
            if held is not None:
                return held
            shard = _shard_data(node)
            if shard is not None:
                return self._shard_data(node, shard, None)
            if node.attr == "shape" and isinstance(node.value, ast.Attribute) \
                    and _shard_data(node.value) is not None:
                return self._shard_data(node.value, _shard_data(node.value), node)
            kind = self.eval(node.value)
            if kind.tag == "record":
                return self._record_field(node, kind)
            if (kind.tag == "repl" and kind.axis == 0 or kind.rows) \
                    and node.attr not in ARRAY_ATTRIBUTES and not node.attr.startswith("_") \
                    and not self._called(node):
                # a field of a replicated tree (`state.params`): replicated too; of a tree in
                # pmap's stacked layout: stacked too
                return kind
            if kind.changed:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              f"`.{node.attr}` of {describe(kind)}"
                              " (its layout changes)")
            return SAME
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
                node.ops[0], (ast.Lt, ast.Gt, ast.LtE, ast.GtE, ast.Eq, ast.NotEq)):
            return self._elementwise(node, [node.left, node.comparators[0]])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and any(
                isinstance(side, ast.Constant) and side.value is None
                for side in (node.left, node.comparators[0])):
            for side in (node.left, node.comparators[0]):
                self.eval(side)  # `x is None`: whether x is None, whatever its layout
            return SAME
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            kinds = [self.eval(e) for e in node.elts]
            if isinstance(node, ast.List) and not node.elts:
                return Kind("empty_list")
            if any(k.changed for k in kinds):
                # A tuple or list of stacks stays a sequence: its `[0]` is its first element.
                if not any(isinstance(e, ast.Starred) for e in node.elts):
                    return Kind("fields", fields=tuple((f"[{i}]", k) for i, k in enumerate(kinds)))
                raise Blocker(CONSUMER_UNKNOWN, node, "a per-device value inside a list")
            if kinds and kinds[0].tag == "devcount" and not isinstance(node.elts[0], ast.Starred):
                return Kind("same", leads=True)  # a shape led by the device count
            return SAME
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self._comprehension(node)
        if isinstance(node, ast.Lambda):
            self._opaque(node)
            return SAME
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) \
                and len(node.values) == 2 and self._still_none(node.values[0]):
            return self.eval(node.values[1])  # `devices = devices or jax.local_devices()`
        default = self._none_default(node)
        if default is not None:  # `devices = jax.local_devices() if devices is None else devices`
            return self.eval(default)
        if isinstance(node, ast.FormattedValue) and self._formatted_stack(node):
            return SAME
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and self.eval(child).changed:
                raise Blocker(CONSUMER_UNKNOWN, child, f"{describe(self.eval(child))} in a "
                              f"{type(node).__name__} expression")
        return SAME

    def _formatted_stack(self, node: ast.FormattedValue) -> bool:
        """`f"{x}"` of a replicated stack formats pmap's n equal rows. The migrated `x` is one
        row, so the field formats it repeated back to those rows, leaf by leaf, through the
        module's `_device_rows` (step_text.DEVICE_ROWS_FUNCTION_TEXT: `v[None].repeat(n,
        axis=0)` keeps a jax Array one and a host array numpy, with its dtype): the same text.
        A function, not the expression in the field: an f-string field cannot be wrapped, and
        the expression took 85 characters. n is the local device count, the rows pmap stacks on
        each process; a replicated global array formats from a local copy on any process. Only
        `str` formatting (no conversion or `!s`, no format spec)."""
        if node.format_spec is not None or node.conversion not in (-1, ord("s")):
            return False
        kind = self.eval(node.value)
        if kind.tag != "repl" or kind.axis != 0:
            return False
        span = self.module.span(node.value)
        made = self.__dict__.setdefault("_stacks_formatted", set())  # (span, text) edited here
        if (span, self.edits.get(span)) in made:
            return True  # the field is read again (a loop, a branch): already rewritten
        text = f"{self.module.device_rows_function}({self.render(node.value)})"
        self._edit(node.value, text)
        made.add((span, text))
        return True

    def _shard_data(self, node: ast.Attribute, array, shape: ast.Attribute | None) -> Kind:
        """`x.addressable_shards[k].data`: pmap's shard k is the (1, ...) row k of its stack.
        Of a replicated stack that row is the migrated value itself. Of a batch placed with
        P(axis) the migrated shard k is block k without the leading 1: its `.shape` is given
        back as `(1, *shape)` (an op on the one-device shard would not run under the mesh)."""
        kind = self.eval(array)
        if kind.tag == "repl":
            return kind
        if kind.tag == "merged" and kind.axis == 0 and kind.placed and least_rank(kind) >= 2:
            if shape is None:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              "a shard of a per-device batch: the migrated shard "
                              "is the device's block without pmap's leading axis of 1")
            self._edit(shape, f"(1, *{self.render(shape)})")
            return SAME
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"`.addressable_shards` of {describe(kind)} that is "
                          "not known to be placed with P(axis) (its layout changes)")
        return SAME

    def qualified(self, func) -> str:
        return dotted(func, self.module.imported)

    def _is_devcount(self, node) -> bool:
        return self.eval(node).tag == "devcount"

    def _rank_of(self, node) -> int | None:
        kind = self.eval(node)
        return kind.rank if kind.tag == "same" else None

    def _subscript(self, node: ast.Subscript) -> Kind:
        if id(node) in self._rows:
            self._edit(node, self.render(node.value))
            return self._rows[id(node)]
        kind = self.eval(node.value)
        index = node.slice
        if kind.tag == "same":
            self._need_same(index)
            if kind.rows and isinstance(index, ast.Constant) and isinstance(index.value, str):
                return ROWS  # a leaf of a dict of stacked rows (a string key is no device row)
            elements = basic_index(index)
            if elements is not None and (kind.rows or kind.rank is not None):
                return indexed_rows(kind, elements) or SAME  # `x[:, None]`, `x[..., 0]`
            if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                    and isinstance(index, ast.Constant) and index.value == 0 \
                    and type(index.value) is int and shape_lead(self.eval(node.value.value)):
                return Kind("devcount")  # `x.shape[0]` of pmap's stacked rows
            return SAME
        if kind.tag == "devices" and isinstance(index, ast.Constant) and type(index.value) is int:
            # One device of the list (`jax.local_devices()[0].platform`): a plain Device,
            # which the migration neither places nor reorders.
            return SAME
        if kind.tag == "devices" and isinstance(index, ast.Slice) and index.step is None \
                and (index.lower is None or isinstance(index.lower, ast.Constant)
                     and index.lower.value == 0 and type(index.lower.value) is int) \
                and index.upper is not None and self._is_devcount(index.upper):
            return kind  # `jax.local_devices()[:n]` with n the device count: all of them
        if id(node) in self.container_rows and kind.tag in ("repl", "merged"):
            return kind  # one tree of a list of trees: the same layout
        if kind.tag == "repl" and kind.axis == 0 and isinstance(index, ast.Constant) \
                and type(index.value) is int and index.value == 0:
            if kind.tree:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              f"`{ast.unparse(node)}`: the step's result may be a "
                              "tuple or list of stacks (then this is its first element, not "
                              "device 0's row); its code does not show one array")
            self._edit(node, self.render(node.value))
            return SAME
        if kind.tag in ("repl", "merged") and isinstance(index, ast.Constant) \
                and isinstance(index.value, str):
            return kind  # a leaf of a tree of stacks
        if kind.tag == "repl" and kind.axis == 0 and isinstance(index, ast.Tuple) \
                and len(index.elts) >= 2 and _is_full_slice(index.elts[0]) \
                and not any(isinstance(e, ast.Starred) for e in index.elts):
            # `stack[:, None]`: the same on every row, so the row itself is `row[None]`.
            for element in index.elts[1:]:
                self._need_same(element)
            rest = ", ".join(self.render(e) for e in index.elts[1:])
            self._edit(node, f"{self.render(node.value)}[{rest}]")
            return kind
        if kind.tag == "fields" and isinstance(index, ast.Constant):
            step = f"[{index.value!r}]" if isinstance(index.value, str) else f"[{index.value}]"
            for key, field in kind.fields:
                if key == step:
                    return field
        if kind.tag == "merged" and kind.rank is not None and isinstance(index, ast.Tuple) \
                and index.elts and isinstance(index.elts[0], ast.Constant) \
                and index.elts[0].value is Ellipsis:
            dropped = 0
            for element in index.elts[1:]:
                if isinstance(element, ast.Slice):
                    for part in (element.lower, element.upper, element.step):
                        if part is not None:
                            self._need_same(part)
                elif isinstance(element, ast.Constant) and type(element.value) is int:
                    dropped += 1
                else:
                    raise Blocker(CONSUMER_UNKNOWN, element, "an index into a per-device batch")
            if kind.rank - dropped >= 2 and len(index.elts) - 1 <= kind.rank - 2:
                return Kind("merged", rank=kind.rank - dropped)
        original = self.original_call_text(node.value) if kind.tag == "merged" else None
        if original is not None:
            # The merged batch cannot be indexed as the original was: the helper's call is
            # written as the original computed it (pmap's stacked layout), and indexed as before
            self._edit(node.value, original)
            self._need_same(index)
            return SAME
        if kind.tag == "list" and kind.element is not None and not isinstance(index, ast.Slice):
            self._need_same(index)
            return kind.element  # an element of a list of values of one kind
        raise Blocker(CONSUMER_UNKNOWN, node, f"`{ast.unparse(node)}` indexes {describe(kind)}")

    def _binop(self, node: ast.BinOp) -> Kind:
        left, right = self.eval(node.left), self.eval(node.right)
        if isinstance(node.op, ast.Add) and left.leads and not right.changed \
                and isinstance(node.right, (ast.Tuple, ast.List)):
            return Kind("same", leads=True)  # `tuple(batch_dims) + (FEATURES,)`: still led
        if not left.changed and not right.changed:
            broadcast = broadcast_rows(node.op, left, right)  # stacked rows, a number
            if broadcast is not None:
                return broadcast
            for kind, other in ((left, right), (right, left)):  # any other operator
                if kind.rows and _number(other):
                    return ROWS
            return NUMBER if _number(left) and _number(right) else SAME
        if isinstance(node.op, ast.MatMult) and left.tag == "merged" and not right.changed:
            if left.rank is not None and left.rank >= 3:
                return Kind("merged")
            raise Blocker(CONSUMER_UNKNOWN, node,
                          "a matrix product on a per-device batch of unknown "
                          "or too small rank")
        elementwise = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
        if isinstance(node.op, elementwise):
            for kind, other in ((left, right), (right, left)):
                # A number with a batch or a replicated stack: row by row, the same operation.
                if (kind.tag == "merged" or kind.tag == "repl" and kind.axis == 0
                        and not kind.tree) and _number(other):
                    return kind
            if left.tag == right.tag == "merged" and left.rank == right.rank is not None:
                return left
        raise Blocker(CONSUMER_UNKNOWN, node,
                      f"`{ast.unparse(node)}` combines {describe(left)} and "
                      f"{describe(right)}")

    def _elementwise(self, node, operands) -> Kind:
        """An elementwise comparison or `where` of per-device batches of one known rank and
        numbers: the merged batch gives the merged result, row for row."""
        kinds = [self.eval(operand) for operand in operands]
        if not any(kind.changed for kind in kinds):
            return SAME
        ranks = {kind.rank for kind in kinds if kind.changed}
        numbers = all(isinstance(o, ast.Constant) and type(o.value) in (int, float, bool)
                      or (isinstance(o, ast.UnaryOp) and isinstance(o.operand, ast.Constant)
                          and type(o.operand.value) in (int, float))
                      for o, kind in zip(operands, kinds) if not kind.changed)
        if all(k.tag == "merged" and k.axis == 0 for k in kinds if k.changed) and numbers \
                and len(ranks) == 1 and None not in ranks:
            return Kind("merged", rank=ranks.pop())
        raise Blocker(CONSUMER_UNKNOWN, node,
                      f"`{ast.unparse(node)}` combines per-device values with "
                      "values other than numbers or batches of the same rank")

    def _dict(self, node: ast.Dict) -> Kind:
        fields = []
        for key, value in zip(node.keys, node.values):
            kind = self.eval(value)
            if key is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, value,
                                  "a per-device value under a computed dict key")
                if key is not None:
                    self.eval(key)
                continue
            fields.append((f"[{key.value!r}]", kind))
        kinds = {k for _, k in fields}
        if not any(k.changed for k in kinds):
            # a dict of arrays each led by the device count (pmap's layout, kept) is too
            return ROWS if kinds and all(k.rows for k in kinds) \
                and len(fields) == len(node.keys) else SAME
        if len(kinds) == 1 and len(fields) == len(node.keys):
            return kinds.pop()  # a tree of stacks of one layout
        return Kind("fields", fields=tuple(fields))

    def _comprehension(self, node) -> Kind:
        per_field = self._over_fields(node)
        if per_field is not None:
            return per_field
        saved = dict(self.kinds)
        length = None
        try:
            for generator in node.generators:
                iterated = self.eval(generator.iter)
                element = self.element(iterated)
                if element is None and iterated.changed:
                    raise Blocker(CONSUMER_UNKNOWN, generator.iter,
                                  "a comprehension over the device axis")
                length = _count(generator.iter, self.elements(iterated, counted=True))
                element = element or SAME
                for name in ast.walk(generator.target):
                    if isinstance(name, ast.Name):
                        self.kinds[name.id] = element
                for condition in generator.ifs:
                    self._same(condition)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            kinds = [self.eval(p) for p in parts]
        finally:
            self.kinds = saved
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and (
                kinds[0].tag in ("repl", "merged") or all(
                    k.tag in ("repl", "merged") for k in self.elements(kinds[0]) or [SAME])):
            # `[np.asarray(l) for l in losses]`, `[(shard(x), shard(y)) for ...]`: a list of
            # them, its length known where it runs once over each element of a display
            return list_of(kinds[0], None if node.generators[0].ifs else length)
        if isinstance(node, ast.GeneratorExp) and len(node.generators) == 1 \
                and not node.generators[0].ifs and kinds[0].changed:
            # `(shard(elem) for elem in data)`: an iterator whose elements have that kind
            return Kind("iterator", element=kinds[0])
        if any(k.changed for k in kinds):
            raise Blocker(CONSUMER_UNKNOWN, node, "a comprehension that builds per-device values")
        return SAME

    def _over_fields(self, node) -> Kind | None:
        """`{k: f(v) for k, v in tree.items()}` over a dict of values of mixed layouts: `f` is
        followed once per entry, and must read the same (edits included) for each."""
        if not (isinstance(node, ast.DictComp) and len(node.generators) == 1):
            return None
        generator = node.generators[0]
        iterated, target = generator.iter, generator.target
        if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute)
                and iterated.func.attr == "items" and not iterated.args and not iterated.keywords
                and isinstance(target, ast.Tuple) and len(target.elts) == 2
                and all(isinstance(e, ast.Name) for e in target.elts)
                and not generator.ifs and not generator.is_async
                and isinstance(node.key, ast.Name) and node.key.id == target.elts[0].id):
            return None
        tree = self.eval(iterated.func.value) if not isinstance(iterated.func.value, ast.Attribute) \
            else SAME
        if tree.tag != "fields" or not all(step.startswith("['") for step, _ in tree.fields):
            return None
        key, value = target.elts[0].id, target.elts[1].id
        if any(isinstance(n, ast.Name) and n.id == key for n in ast.walk(node.value)):
            raise Blocker(CONSUMER_UNKNOWN, node,
                          "a comprehension over per-device values that reads "
                          "their keys")
        saved = dict(self.kinds)
        before = dict(self.edits)
        fields, texts = [], set()
        try:
            for step, field in tree.fields:
                self.edits = dict(before)
                self.kinds[value] = field
                fields.append((step, self.eval(node.value)))
                texts.add(self.render(node.value))
        finally:
            self.kinds = saved
        if len(texts) > 1:
            raise Blocker(CONSUMER_UNKNOWN, node.value,
                          "a comprehension whose migrated form differs "
                          "between entries of different layouts")
        return Kind("fields", fields=tuple(fields))

    def _need_same(self, node) -> Kind:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"{describe(kind)} where a plain value is expected")
        return SAME


def _number(kind: Kind) -> bool:
    """A plain scalar (a number literal, a name bound only to one, `jax.process_index()`):
    with it, an arithmetic operation on a batch or a stack acts row by row."""
    return kind.tag == "devcount" or (
        kind.tag == "same" and kind.rank == 0 and not kind.rows and not kind.scalars)


def _count(iterated, elements) -> int | None:
    """How many elements iterating `iterated` gives, where known: a display without
    `*`, or a value of known elements."""
    if isinstance(iterated, (ast.Tuple, ast.List)) and not any(
            isinstance(e, ast.Starred) for e in iterated.elts):
        return len(iterated.elts)
    return None if elements is None else len(elements)


def _is_full_slice(node) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None \
        and node.step is None


def _shard_data(node: ast.Attribute) -> ast.AST | None:
    """x of `x.addressable_shards[k].data` (k a literal int), else None."""
    row = node.value
    if node.attr == "data" and isinstance(row, ast.Subscript) \
            and isinstance(row.value, ast.Attribute) and row.value.attr == "addressable_shards" \
            and isinstance(row.slice, ast.Constant) and type(row.slice.value) is int:
        return row.value.value
    return None
