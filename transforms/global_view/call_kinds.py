"""What kind of value a call gives in a caller of global sites: a site's call (site_calls.py)
or an instance's (instances.py), the device count and device list, a producer or consumer
(idioms.py, consumers.py), a module helper function followed with its arguments' kinds, and
a generic call, which no per-device value may reach. A mixin of `CallerAnalysis` (dataflow.py
holds the state it reads); the other expressions are expressions.py."""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import CALLERS_UNSEEN, CONSUMER_UNKNOWN, PRODUCER_UNKNOWN
from transforms.global_view.callers import MODULE_CALLER
from transforms.global_view.sites import PMAP, Blocker
from transforms.global_view.stacked_rows import joined_rank, literal_axis, vmapped_arguments
from transforms.global_view.values import (
    ELEMENTWISE_FUNCTIONS,
    SHAPE_KEEPING_METHODS,
    CONSTANT_FILLS,
    DEVICE_COUNT,
    DEVICES,
    NUMBER,
    PREFETCH_TO_DEVICE,
    PROCESS_NUMBERS,
    REPLICATE,
    ROWS,
    SAME,
    SHARD,
    SHARD_PRNG_KEY,
    Kind,
    describe,
    with_origin,
)

# numpy / jax.numpy functions `_rearranged_rows` reads.
_ROW_FUNCTIONS = frozenset(f"{module}.{function}" for module in ("numpy", "jax.numpy")
                           for function in ("swapaxes", "moveaxis", "transpose", "expand_dims",
                                            "squeeze", "concatenate", "stack"))

# jax transformations whose lambda, called on the spot, is read in place (see
# `_transformed_lambda_call`).
_LAMBDA_TRANSFORMS = frozenset({"jax.grad", "jax.jit", "jax.checkpoint", "jax.remat"})

# How deep helpers are followed from a caller (`create_input_iter` -> `prefetch_to_device` ->
# `device_order` is three): a bound on the work per call, not a rule of the analysis.
MAX_HELPER_DEPTH = 6


class CallKindsMixin:
    """`CallerAnalysis`'s evaluation of calls, and its following of module helpers."""

    def _call(self, call: ast.Call) -> Kind:
        func = call.func
        lowered = self._lowering_call(call)
        if lowered is not None:
            return lowered
        held = self._instance_call(call)
        if held is not None:
            return held
        followed = self._class_method_call(call)
        if followed is not None:
            return followed
        name = self.qualified(func)
        transformed = self._transformed_lambda_call(call)
        if transformed is not None:
            return transformed
        local = self.local_function(func) if isinstance(func, ast.Name) \
            and func.id not in self.sites and func.id not in self.made_by_factory else None
        if local is not None:
            return self.local_call(call, local)
        if isinstance(func, ast.Call) and self.site_read(func.func) is not None \
                and self.sites[func.func.id].factory:
            for argument in [*func.args, *(k.value for k in func.keywords)]:
                kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, argument,
                                  f"{describe(kind)} passed to the pmap "
                                  f"factory `{func.func.id}`")
            return self.site_call(call, self.sites[func.func.id])
        if isinstance(func, ast.Name) and func.id in self.made_by_factory:
            return self.site_call(call, self.made_by_factory[func.id])  # `made(x)`
        if self.site_read(func) is not None:
            if self.sites[func.id].factory and id(call) in self.factory_builds:
                for argument in [*call.args, *(k.value for k in call.keywords)]:
                    kind = self.eval(argument.value if isinstance(argument, ast.Starred)
                                     else argument)
                    if kind.changed:
                        raise Blocker(CONSUMER_UNKNOWN, argument,
                                      f"{describe(kind)} passed to the pmap "
                                      f"factory `{func.id}`")
                return SAME  # `made = factory(...)`: its calls are the site's (above)
            if self.sites[func.id].factory:
                raise Blocker(CALLERS_UNSEEN, call,
                              f"the pmap factory `{func.id}` called other than "
                              f"as `{func.id}(...)(...)`")
            return self.site_call(call, self.sites[func.id])
        if id(func) in self.inline:
            return self.site_call(call, self.inline[id(func)])
        if name in DEVICE_COUNT and not call.args:
            return Kind("devcount")
        if name in DEVICES and not call.args:
            return Kind("devices")
        if name in self.module.imported_values and not call.args and not call.keywords:
            return Kind(self.module.imported_values[name])  # another module's device order
        if name in PROCESS_NUMBERS and not call.args and not call.keywords:
            return NUMBER
        if (name == "builtins.next" or (isinstance(func, ast.Name) and func.id == "next"
                                        and "next" not in self.module.table.bound_otherwise)) \
                and len(call.args) == 1 and not call.keywords:
            kind = self.eval(call.args[0])
            if kind.tag == "iterator":
                return kind.element
        if name == "builtins.len" or (isinstance(func, ast.Name) and func.id == "len"):
            if len(call.args) == 1 and self.eval(call.args[0]).tag == "devices":
                return Kind("devcount")
        if (name in ("builtins.list", "builtins.tuple") or (
                isinstance(func, ast.Name) and func.id in ("list", "tuple")
                and func.id not in self.module.table.bound_otherwise)) \
                and len(call.args) == 1 and not call.keywords:
            kind = self.eval(call.args[0])
            if kind.tag == "devices":
                return Kind("devices")  # `list(jax.devices())`: the same devices, in their order
            if kind.leads:
                return kind  # `tuple(batch_dims)`: the same shape
        if name == "collections.deque" and not call.args and not call.keywords:
            return Kind("empty_list")  # a queue: the list it is, appended to and popped from
        popped = self._popped(call)
        if popped is not None:
            return popped
        iterated = self._iterator_call(call, name)
        if iterated is not None:
            return iterated
        produced = self.producer(call, name)
        if produced is not None:
            self.produced[id(call)] = name
            if id(call) in self.keep_stacked and produced.changed:
                # pmap's stacked layout, kept: no edit, the device count as leading axis
                span = self.module.span(call)
                for key in [k for k in self.edits if span[0] <= k[0] and k[1] <= span[1]]:
                    del self.edits[key]
                return Kind("same", rank=_filled_rank(call, name), rows=True)
            # A stack or a batch this call makes from plain values may go back to pmap's
            # layout: its leading axis is the device count before the migration merges or
            # unstacks it. Not device_put_sharded, whose rows may be read from a batch merged
            # elsewhere: that batch's producer would stay merged while these rows go back.
            keeps = ("repl", "fields") if name == "jax.device_put_sharded" else (
                "repl", "fields", "merged")
            return with_origin(produced, frozenset({id(call)})) if produced.tag in keeps and (
                produced.tag != "fields" or "merged" not in repr(produced)) else produced
        consumed = self._consumer(call, name)
        if consumed is not None:
            return consumed
        if isinstance(func, ast.Name) and func.id in self.module.nested_steps:
            return self._nested_step_call(call, func.id)
        values = [*call.args, *(k.value for k in call.keywords)]
        if isinstance(func, ast.Name) and func.id in self.module.functions and (any(
                self.site_read(a) is not None for a in values) or any(
                self.eval(a).tag not in ("same",) or self.eval(a).leads for a in values
                if not isinstance(a, ast.Starred)) or self._produces(func.id)
                or func.id in self.module.folded or self._reads_top_level_values(func.id)):
            return self._helper_call(call, self.module.functions[func.id])
        rebuilt = self._rebuilt_tree(call, func, name)
        if rebuilt is not None:
            return rebuilt
        if self._reshaped_rows(call, func, name):
            return ROWS
        kept = self._shape_kept_rows(call, func, name) or self._rearranged_rows(call, func, name)
        if kept is not None:
            return kept
        at_base = _at_update_base(func)
        if at_base is not None and self.eval(at_base).rows:
            # `x.at[i].set(v)` of pmap's stacked rows: the same shape, so still the rows
            self._need_same(func.value.slice)
            for argument in [*call.args, *(k.value for k in call.keywords)]:
                self._need_same(argument)
            return ROWS
        # A generic call: nothing per-device may reach it.
        if isinstance(func, ast.Attribute):
            self.eval(func)
        elif not isinstance(func, ast.Name):
            self._same(func)
        rows = False
        vmapped = vmapped_arguments(call, self.qualified) or []
        mapped_rows = False
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
            if kind.changed:
                raise Blocker(CONSUMER_UNKNOWN, argument, f"{describe(kind)} passed to "
                              f"`{ast.unparse(func)}`, which the global style does not follow")
            rows = rows or kind.rows
            mapped_rows = mapped_rows or kind.rows and any(argument is a for a in vmapped)
        # A pmap kept with its calling contract maps every argument on axis 0: given stacked
        # rows, its results have the device count as leading axis too. So does jax.vmap
        # mapping stacked rows on axis 0 (out_axes 0): its results lead with their axis; and
        # so does an array built with the device count as its leading extent
        # (`jax.random.normal(key, (n, 3))`, `np.linspace(0, 1, n)`: argument_specs.py).
        return ROWS if rows and self._contract_pmap(func) or mapped_rows \
            or self._sized_by_devcount(call, 0) else SAME

    def _nested_step_call(self, call: ast.Call, name: str) -> Kind:
        """A call of a nested pmap written in the global style (nested_sites.py): its 2-D
        form takes and returns pmap's rows, so it is given only values this function leaves
        as the original had them, and its results are the original's."""
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            kind = self.eval(value)
            if self.site_read(value) is not None or kind.tag != "same" or kind.leads:
                what = "a pmap step" if self.site_read(value) is not None else describe(kind)
                raise Blocker(CONSUMER_UNKNOWN, argument, f"{what} passed to `{name}`, a "
                              "nested pmap whose 2-D form takes the values pmap took")
        return SAME

    def _popped(self, call: ast.Call) -> Kind | None:
        """`xs.pop()`, `xs.pop(0)`, `queue.popleft()` of a list (or deque) this function
        builds: one of its elements. None for any other call."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and (func.attr == "pop" and len(call.args) <= 1
                     or func.attr == "popleft" and not call.args) and not call.keywords):
            return None
        kind = self.kinds.get(func.value.id)
        if kind is None or kind.tag not in ("list", "empty_list"):
            return None
        for argument in call.args:
            self._need_same(argument)
        return kind.element if kind.tag == "list" else SAME

    def _rebuilt_tree(self, call: ast.Call, func, name: str) -> Kind | None:
        """`dict(state, stats=s)`, `state.replace(batch_stats=s)` (flax's struct dataclasses,
        TrainState), `state._replace(...)`, `dataclasses.replace(state, ...)`: a tree rebuilt
        from values of one layout only has it too. From pmap's stacked rows only, every leaf
        keeps the device count as its leading axis: stacked rows. From replicated values
        only, every leaf is replicated: a replicated tree. None for any other call or mix."""
        if any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg is None for k in call.keywords):
            return None
        values = [*call.args, *(k.value for k in call.keywords)]
        if self._builtin(func, name, "dict") and len(call.args) <= 1 \
                or name == "dataclasses.replace" and len(call.args) == 1:
            pass
        elif isinstance(func, ast.Attribute) and func.attr in ("replace", "_replace") \
                and not call.args and call.keywords:
            values.insert(0, func.value)
        else:
            return None
        kinds = [self.eval(v) for v in values]
        if kinds and all(k.rows and not k.changed for k in kinds):
            return ROWS
        if kinds and all(k.tag == "repl" and k.axis == kinds[0].axis for k in kinds):
            return Kind("repl", kinds[0].axis, tree=True,
                        origin=frozenset().union(*(k.origin for k in kinds)))
        return self._rebuilt_record(call, func, name)

    def _transformed_lambda_call(self, call: ast.Call) -> Kind | None:
        """`jax.grad(lambda x: ...)(grid)`, `jax.jit(lambda x: ...)(x)`: a lambda given to a
        jax transformation and called on the spot is called with the call's arguments, so its
        body is read with its parameters bound to their kinds (sites called in it included).
        jit gives what the body gives. grad gives a gradient shaped as its first argument: of
        pmap's per-device batch, the merged batch's gradient (merging is a reshape, which
        the gradient goes through as it is), of an unchanged value an unchanged value; of a
        replicated stack it is not followed (each row's gradient is its own: no longer
        equal rows). None for any other call."""
        func = call.func
        if not (isinstance(func, ast.Call) and len(func.args) == 1 and not func.keywords
                and isinstance(func.args[0], ast.Lambda)):
            return None
        transform = self.qualified(func.func)
        if transform not in _LAMBDA_TRANSFORMS:
            return None
        function = func.args[0]
        parameters = function.args
        if parameters.posonlyargs or parameters.vararg or parameters.kwarg \
                or parameters.kwonlyargs or parameters.defaults or call.keywords \
                or any(isinstance(a, ast.Starred) for a in call.args) \
                or len(call.args) != len(parameters.args):
            return None
        kinds = [self.eval(argument) for argument in call.args]
        saved = dict(self.kinds)
        try:
            for parameter, kind in zip(parameters.args, kinds):
                self.kinds[parameter.arg] = kind
            result = self.eval(function.body)
        finally:
            self.kinds = saved
        if transform != "jax.grad":
            return result
        if result.changed:
            raise Blocker(CONSUMER_UNKNOWN, function.body, f"`jax.grad` of a function that "
                          f"returns {describe(result)}")
        first = kinds[0] if kinds else SAME
        if first.changed and not (first.tag == "merged" and first.axis == 0):
            raise Blocker(CONSUMER_UNKNOWN, call.args[0], f"the gradient with respect to "
                          f"{describe(first)}, whose migrated form is not a reshape of it")
        return dataclasses.replace(first, placed=False) if first.tag == "merged" else first

    def _shape_kept_rows(self, call: ast.Call, func, name: str) -> Kind | None:
        """`x.block_until_ready()`, `x.astype(t)`, `jnp.tanh(x)`, `jnp.clip(x, 0, 1)` of pmap's
        stacked rows x: an array of x's shape, so stacked rows of its rank too. Only the array
        itself may be stacked; the other arguments (bounds, dtypes) are plain numbers."""
        if any(isinstance(a, ast.Starred) for a in call.args):
            return None
        if isinstance(func, ast.Attribute) and func.attr in SHAPE_KEEPING_METHODS:
            array, others = func.value, [*call.args, *(k.value for k in call.keywords)]
        elif name in ELEMENTWISE_FUNCTIONS and call.args:
            array, others = call.args[0], [*call.args[1:], *(k.value for k in call.keywords)]
        else:
            return None
        kind = self.eval(array)
        if not kind.rows or kind.changed:
            return None
        clipped = (func.attr if isinstance(func, ast.Attribute) else name).endswith("clip")
        for other in others:
            self._need_same(other)
            other_kind = self.eval(other)
            if other_kind.rows or clipped and other_kind.rank != 0 and not (
                    isinstance(other, ast.Constant) and other.value is None):
                return None  # bounds of another shape would broadcast
        return Kind("same", rank=kind.rank, rows=True)

    def _rearranged_rows(self, call: ast.Call, func, name: str) -> Kind | None:
        """Stacked rows rearranged away from axis 0, which keep the device count as their
        leading axis: `x.swapaxes(i, j)` / `jnp.swapaxes(x, i, j)` and `jnp.moveaxis(x, i, j)`
        with neither axis 0, `x.transpose(0, ...)` / `jnp.transpose(x, (0, ...))`,
        `jnp.expand_dims(x, k)` and `jnp.squeeze(x, k)` with k not 0, and `jnp.concatenate(xs,
        axis=k)` / `jnp.stack(xs, axis=k)` of stacked rows with k not 0. Axes are literal
        ints (a negative one only where the rank is known). None for anything else."""
        if any(isinstance(a, ast.Starred) for a in call.args):
            return None
        keywords = {k.arg: k.value for k in call.keywords}
        if None in keywords:
            return None
        method = func.attr if isinstance(func, ast.Attribute) and name not in _ROW_FUNCTIONS \
            else None
        function = name.rsplit(".", 1)[-1] if name in _ROW_FUNCTIONS else None
        if method in ("swapaxes", "transpose") and not keywords:
            array, axes = func.value, list(call.args)
        elif function in ("swapaxes", "moveaxis", "transpose", "expand_dims", "squeeze") \
                and call.args and set(keywords) <= {"axis", "axes", "axis1", "axis2",
                                                    "source", "destination"}:
            array, axes = call.args[0], [*call.args[1:], *keywords.values()]
        elif function in ("concatenate", "stack") and len(call.args) == 1 \
                and set(keywords) == {"axis"} and isinstance(call.args[0], (ast.List, ast.Tuple)) \
                and call.args[0].elts and not any(isinstance(e, ast.Starred)
                                                 for e in call.args[0].elts):
            kinds = [self.eval(e) for e in call.args[0].elts]
            if not all(k.rows and not k.changed for k in kinds):
                return None
            rank = joined_rank(kinds)
            axis = literal_axis(keywords["axis"], None if rank is None else
                                rank + (function == "stack"))
            if axis is None or axis == 0:
                return None
            return Kind("same", rank=None if rank is None else rank + (function == "stack"),
                        rows=True)
        else:
            return None
        kind = self.eval(array)
        if not kind.rows or kind.changed:
            return None
        if (method or function) == "transpose":
            if len(axes) == 1 and isinstance(axes[0], (ast.Tuple, ast.List)):
                axes = list(axes[0].elts)
            order = [literal_axis(a, kind.rank) for a in axes]
            if not order or None in order or order[0] != 0 or sorted(order) != list(
                    range(len(order))) or kind.rank not in (None, len(order)):
                return None
            return Kind("same", rank=len(order), rows=True)
        expanded = function == "expand_dims"
        if len(axes) != (2 if (method or function) in ("swapaxes", "moveaxis") else 1):
            return None
        positions = [literal_axis(a, None if kind.rank is None else kind.rank + expanded)
                     for a in axes]
        if None in positions or 0 in positions:
            return None
        rank = kind.rank
        if rank is not None and function in ("expand_dims", "squeeze"):
            rank += 1 if expanded else -1
        return Kind("same", rank=rank, rows=True)

    def _reshaped_rows(self, call: ast.Call, func, name: str) -> bool:
        """`jnp.reshape(x, (x.shape[0], 1, x.shape[1]))`, `x.reshape(x.shape[0], -1)` of pmap's
        stacked rows `x` (a name): the leading axis is kept, so the result is stacked rows too
        (flax lm1b's replicated prompt made (n, 1, length))."""
        if call.keywords:
            return False
        if name in ("jax.numpy.reshape", "numpy.reshape") and len(call.args) == 2:
            array, shape = call.args[0], [call.args[1]]
        elif isinstance(func, ast.Attribute) and func.attr == "reshape" and call.args:
            array, shape = func.value, list(call.args)
        else:
            return False
        if len(shape) == 1 and isinstance(shape[0], (ast.Tuple, ast.List)):
            shape = shape[0].elts
        lead = shape[0] if shape else None
        if not isinstance(array, ast.Name) or any(isinstance(e, ast.Starred) for e in shape) \
                or not (isinstance(lead, ast.Subscript) and isinstance(lead.value, ast.Attribute)
                        and lead.value.attr == "shape" and isinstance(lead.value.value, ast.Name)
                        and lead.value.value.id == array.id
                        and isinstance(lead.slice, ast.Constant) and lead.slice.value == 0):
            return False
        kind = self.eval(array)
        if not kind.rows or kind.changed:
            return False
        for extent in shape[1:]:
            self._need_same(extent)
        return True

    def _builtin(self, func, name: str, builtin: str) -> bool:
        """`func` is the builtin `builtin`, by its qualified or its own unshadowed name."""
        return name == f"builtins.{builtin}" or (
            isinstance(func, ast.Name) and func.id == builtin
            and builtin not in self.module.table.bound_otherwise)

    def _iterator_call(self, call: ast.Call, name: str) -> Kind | None:
        """What `zip`, `enumerate` and `map` over iterators of per-device values hand out, and
        flax's prefetch_to_device of an iterator of batches: an iterator whose elements have a
        known kind (the loop `for step, batch in zip(range(k), train_iter)` binds batch to
        them). None for any other call, or when nothing per-device is iterated."""
        func = call.func
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        if self._builtin(func, name, "zip") and call.args:
            elements = [self._element_of(a) for a in call.args]
        elif self._builtin(func, name, "enumerate") and len(call.args) == 1:
            elements = [NUMBER, self._element_of(call.args[0])]
        elif name == "itertools.islice" and 2 <= len(call.args) <= 4:
            # the first elements of an iterator: of the same kind
            for bound in call.args[1:]:
                self._need_same(bound)
            element = self._element_of(call.args[0])
            return Kind("iterator", element=element) if element.changed else None
        elif self._builtin(func, name, "map") and len(call.args) == 2:
            element = self._element_of(call.args[1])
            mapped = self._mapped(call, call.args[0], element)
            return Kind("iterator", element=mapped) if mapped.changed else None
        elif name == PREFETCH_TO_DEVICE and len(call.args) == 2:
            element = self._element_of(call.args[0])
            self._need_same(call.args[1])
            if element.tag == "merged" and element.axis == 0:
                # Each leaf split on its leading axis over the local devices: in one process
                # the batch placed on the mesh; with several, the process's own rows, made
                # one global array at the step's call as a host batch is.
                return Kind("iterator", element=dataclasses.replace(
                    element, placed=self.batches_placed))
            if element.changed:
                raise Blocker(CONSUMER_UNKNOWN, call.args[0], f"{describe(element)} prefetched "
                              "to the devices, which the global style does not follow")
            return None
        else:
            return None
        if not any(e.changed for e in elements):
            return None
        return Kind("iterator", element=Kind("fields", fields=tuple(
            (f"[{i}]", e) for i, e in enumerate(elements))))

    def _element_of(self, iterable) -> Kind:
        """The kind of each element of `iterable`: SAME for a plain one."""
        kind = self.eval(iterable)
        if not kind.changed:
            return SAME
        element = self.element(kind)
        if element is None:
            raise Blocker(CONSUMER_UNKNOWN, iterable, f"{describe(kind)} iterated in a way the "
                          "global style does not follow")
        return element

    def _mapped(self, call: ast.Call, function, element: Kind) -> Kind:
        """The kind `map(function, xs)` gives each element: `function` a module function (a
        program's own `prepare_tf_data`, followed as a helper given one element) or flax's
        shard; SAME where it is given and makes nothing per-device."""
        name = self.qualified(function)
        if name in SHARD:
            if element.changed:
                raise Blocker(CONSUMER_UNKNOWN, call, f"{describe(element)} passed to "
                              f"`{ast.unparse(function)}`")
            # Each element stays the whole host batch: the iterator of the batches themselves
            self._edit(call, f"iter({self.render(call.args[1])})")
            return Kind("merged", least=2)
        if isinstance(function, ast.Name) and function.id in self.module.functions and (
                element.changed or self._produces(function.id)):
            return self._helper_call(call, self.module.functions[function.id], [element])
        if element.changed:
            raise Blocker(CONSUMER_UNKNOWN, call, f"{describe(element)} passed to "
                          f"`{ast.unparse(function)}`, which the global style does not follow")
        return SAME

    def _contract_pmap(self, func) -> bool:
        """`func` is a pmap left to pmap's contract with in_axes and out_axes 0: a blocked site
        called by name, or `jax.pmap(f)` / `jax.pmap(f, axis_name)` called on the spot."""
        if isinstance(func, ast.Name):
            site = self.module.site_named(func.id) if func.id not in self.sites else None
            return site is not None and site.out_tree is None and not site.out_none \
                and all(axis == 0 for axis in site.in_axes) and not site.static
        return isinstance(func, ast.Call) and self.qualified(func.func) == PMAP \
            and len(func.args) <= 2 and all(k.arg == "axis_name" for k in func.keywords)

    def _reads_top_level_values(self, name: str) -> bool:
        """Top-level code calls the module function `name`, which reads a global the code
        holds the device count, devices or a shape led by it in."""
        if self.function.name != MODULE_CALLER:
            return False
        helper = self.module.functions[name]
        special = {k for k, v in self.kinds.items() if v.tag != "same" or v.leads}
        bound = _bound_in(helper)
        return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in special
                   and n.id not in bound for n in ast.walk(helper))

    def _helper_call(self, call: ast.Call, helper: ast.FunctionDef,
                     given: list[Kind] | None = None) -> Kind:
        """A module function given the device count or stacks (`x, y = make_data(n)`): it is
        followed with those parameter kinds, and its own edits join this function's, when
        nothing else in the module calls it. `given`: the kinds of its positional arguments,
        where `call` does not pass them itself (`map(prepare, batches)` calls it on each
        element)."""
        name = helper.name
        arguments = helper.args
        passed = len(call.args) if given is None else len(given)
        # Used elsewhere too: followed only if it needs no edit, so that it stays the same
        # function for every other use (`def device_order(): return jax.local_devices()`).
        shared = self.module.loads.get(name, 0) != self._calls_here(name)
        cannot_follow = Blocker(CONSUMER_UNKNOWN, call,
                                f"the device count or a per-device value is passed to "
                                f"`{name}`, which the global style cannot follow (called "
                                "elsewhere too, with ** or *args, or calling pmap sites itself)")
        named = [a.arg for a in arguments.args] + [a.arg for a in arguments.kwonlyargs]
        keywords = {k.arg: k.value for k in call.keywords}
        required = [a.arg for a in arguments.args[:len(arguments.args) - len(arguments.defaults)]]
        required += [a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)
                     if d is None]
        filled = set(named[:passed]) | set(keywords)
        if (self.depth >= MAX_HELPER_DEPTH or name in self.chain
                or given is not None and call.keywords
                or arguments.vararg or arguments.kwarg
                or arguments.posonlyargs or passed > len(arguments.args)
                or None in keywords or any(k not in named or k in named[:passed] for k in keywords)
                or any(r not in filled for r in required)  # a TypeError in the original
                or any(isinstance(a, ast.Starred) for a in call.args)
                or helper.decorator_list or name in self.module.callers
                or helper is self.function):
            raise cannot_follow
        generator = _is_generator(helper)
        if generator:
            own = {id(s.value) for s in ast.walk(helper) if isinstance(s, ast.Expr)}
            odd = next((n for n in ast.walk(helper) if isinstance(n, ast.YieldFrom) and id(
                n) not in own or (isinstance(n, ast.Yield) and (id(n) not in own
                                                                or n.value is None))), None)
            if odd is not None:
                raise Blocker(CONSUMER_UNKNOWN, odd,
                              f"`{name}` is a generator given the device count or "
                              "per-device values, and this yield is not a `yield value` "
                              "or `yield from iterable` statement, so what it hands out is "
                              "not followed")
        # A step passed by name (`evaluate(p_eval_step=p_eval_step, ...)`): the helper's
        # calls of that parameter are calls of the step, read there as here.
        passed_values = [*zip(named, call.args if given is None else ()), *keywords.items()]
        stepped = {p: self.sites[v.id] for p, v in passed_values
                   if self.site_read(v) is not None}
        for site in stepped.values():
            if site.donate or site.factory or shared:
                raise Blocker(CONSUMER_UNKNOWN, call, f"{site.label} is passed to `{name}`, "
                              "which the global style follows only for a step that donates "
                              "nothing, and a helper nothing else calls")
        parameters = {p: self.eval(v) for p, v in passed_values if p not in stepped} \
            if given is None else dict(zip((a.arg for a in arguments.args), given))
        if given is not None:
            parameters.update((k, self.eval(v)) for k, v in keywords.items())
        if self.function.name == MODULE_CALLER:
            # called from top-level code, a helper reads the module's globals as that code
            # has them at the call (`n_devices` of `split(xs)`)
            bound = _bound_in(helper)
            parameters = {**{k: v for k, v in self.kinds.items() if k not in bound},
                          **parameters}
        analysis = type(self)(helper, self.all_sites, self.module, parameters, self.depth + 1)
        analysis.chain = self.chain | {self.function.name}
        # A folded caller's own sites are this caller's: it calls the module's by their
        # names, and builds its own (`avg = jax.pmap(...)`, or on the spot).
        own = [self.all_sites[k] for k in self.module.folded.get(name, ())
               if k in self.all_sites]
        analysis.sites = {**{s.name: s for s in own if not s.inline}, **stepped}
        analysis.inline = {id(s.node): s for s in own if s.inline}
        analysis.local_builds = {id(s.built) for s in own if s.owner and not s.inline}
        analysis.keep_stacked = self.keep_stacked  # producers in it the caller keeps stacked
        # One rewrite of a helper serves every call this caller's analysis follows, at any
        # depth: the edits each call asks for, and where the calls are, are the caller's.
        analysis.helper_edits, analysis.followed_calls = self.helper_edits, self.followed_calls
        for flag in ("merge_outputs", "split_results"):  # the caller's mode of reading results
            setattr(analysis, flag, getattr(self, flag))
        defaults = [*zip(arguments.args[len(arguments.args) - len(arguments.defaults):],
                         arguments.defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]
        analysis.defaulted_none = frozenset(
            a.arg for a, default in defaults
            if a.arg not in parameters and isinstance(default, ast.Constant)
            and default.value is None)
        analysis.run_helper()
        if shared and analysis.edits:
            # Used elsewhere too. In another module of the run: it must stay as it is. In this
            # module: one rewritten helper serves this analysis's calls of it (the train and
            # the eval loader's `shard`), if every use of it in the module turns out to be
            # one of those calls (`check_helpers_followed`).
            if self.module.elsewhere(name) is not None:
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` would be rewritten for the per-device values this "
                              f"call passes, but it is used elsewhere too "
                              f"({self.module.elsewhere(name)}), where it must stay as it is")
            shared = False
        if not shared:
            # One rewritten helper serves every call: each call's analysis must ask for the
            # same edits (calls passing other layouts, or None where another passes a value
            # the helper tests, would not).
            calls = self.helper_edits.setdefault(name, {})
            calls[id(call)] = sorted(analysis.edits.items())  # a loop's later pass replaces it
            # the name as read there: the called function, or `map(helper, ...)`'s argument
            self.followed_calls.setdefault(name, set()).update(
                id(n) for n in (call.func, *call.args)
                if isinstance(n, ast.Name) and n.id == name)
            if any(other != calls[id(call)] for other in calls.values()):
                raise Blocker(CONSUMER_UNKNOWN, call, f"`{name}` is called with values of "
                              "different layouts, and one rewritten helper cannot serve them all")
            self.edits.update(analysis.edits)
            self.helpers.add(name)
            self._steps_called_in(analysis, call)
        result = None
        if generator:
            if any(node.value is not None for node, _ in analysis.returns):
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is a generator that also returns a value")
            for node, kind in analysis.yields:
                result = self._join(result, kind, f"what {name} yields", node)
            return Kind("iterator", element=result) if result and (
                result.changed or result.rows) else SAME
        for node, kind in analysis.returns:
            result = self._join(result, kind, f"the result of {name}", node)
        return result or SAME

    def _steps_called_in(self, analysis, call: ast.Call) -> None:
        """The layouts a followed helper gave the steps it was passed: this caller's, so that
        each step is written once for every call, here and there."""
        for key, specs in analysis.specs.items():
            if self.specs.setdefault(key, specs) != specs or \
                    self.modes.setdefault(key, analysis.modes[key]) != analysis.modes[key]:
                raise Blocker(PRODUCER_UNKNOWN, call, f"{self.all_sites[key].label} is called "
                              f"with different layouts here and in `{analysis.function.name}`")
        self.site_calls.update(analysis.site_calls)
        self.expansions.update(analysis.expansions)
        self.stacked.update(analysis.stacked)

    def original_call_text(self, call) -> str | None:
        """The text of a followed helper's call as the original computed it, where the helper
        is one `return expression` line given plain names: the expression with its parameters
        replaced by them (its other names mean the same here: none is bound in this function).
        None otherwise."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id in self.helpers and not call.keywords):
            return None
        helper = self.module.functions[call.func.id]
        body = [s for s in helper.body if not (isinstance(s, ast.Expr)
                                               and isinstance(s.value, ast.Constant))]
        params = [a.arg for a in helper.args.args]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None \
                or len(call.args) != len(params) or body[0].lineno != body[0].end_lineno \
                or not all(isinstance(a, ast.Name) and not self.eval(a).changed
                           for a in call.args):
            return None
        expression = body[0].value
        bound = {n.id for n in ast.walk(self.function) if isinstance(n, ast.Name)
                 and not isinstance(n.ctx, ast.Load)} | {a.arg for a in ast.walk(
                     self.function.args) if isinstance(a, ast.arg)}
        given = dict(zip(params, (a.id for a in call.args)))
        names = [n for n in ast.walk(expression) if isinstance(n, ast.Name)]
        if any(n.id not in given and n.id in bound for n in names) or any(
                isinstance(n, (ast.Lambda, ast.NamedExpr, ast.comprehension))
                for n in ast.walk(expression)):
            return None
        start, end = self.module.span(expression)
        return self.module.render(start, end, {self.module.span(n): given[n.id]
                                               for n in names if n.id in given})

    def _calls_here(self, name: str) -> int:
        """How many times this function calls `name`: a helper it follows must have no other
        use in the module, since the helper is rewritten for this function."""
        return len(self._calls_of(name))

    def _calls_of(self, name: str) -> list[ast.Call]:
        """The calls of the module function `name` in this function: `name(...)`, or
        `map(name, xs)`, which calls it on each element."""
        return [n for n in ast.walk(self.function) if isinstance(n, ast.Call) and (
            isinstance(n.func, ast.Name) and n.func.id == name
            or isinstance(n.func, ast.Name) and n.func.id == "map" and len(n.args) == 2
            and isinstance(n.args[0], ast.Name) and n.args[0].id == name)]

    def _produces(self, name: str, seen: frozenset = frozenset()) -> bool:
        """A module function that builds per-device values itself (a program's own
        `replicate(tree)` over device_put_replicated, a `shard(x)` reshaping to the device
        count), or reads one that does (`create_input_iter` mapping `prepare_tf_data` over a
        dataset): followed like a helper given the device count. One device of the list
        (`jax.local_devices()[0].platform`) is a plain Device, no per-device value."""
        nodes = list(ast.walk(self.module.functions[name]))
        if any(isinstance(n, (ast.Name, ast.Attribute)) and self.qualified(n) == PMAP
               for n in nodes):
            return False
        one_device = {id(n.value) for n in nodes if isinstance(n, ast.Subscript)
                      and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int}
        return any(isinstance(n, ast.Call) and self.qualified(n.func) in _PRODUCING
                   and not (id(n) in one_device and self.qualified(n.func) in DEVICES)
                   for n in nodes) or any(
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id != name
            and n.id in self.module.functions and n.id not in seen
            and self._produces(n.id, seen | {name}) for n in nodes)

    def run_helper(self) -> None:
        """The helper's body, as the caller's analysis reads it; a blocker that names no
        producer gets the producers behind what the blocked node reads (the helper's own
        `shard(batch)`, or what the caller passed), which the caller may keep stacked."""
        try:
            self._block(self.function.body)
            self.check_helpers_followed()
        except Blocker as blocker:
            if blocker.origins or blocker.site is not None:
                raise
            raise dataclasses.replace(blocker, origins=self._origins_at(blocker.node)) from None

    def check_helpers_followed(self) -> None:
        """A helper rewritten for the per-device values one call passes is the helper every
        call in this function runs: each must have been followed, asking the same edits
        (`split_rows(x, n)` merges its reshape, which would change `split_rows(x, 2)`)."""
        for name in self.helpers:
            followed = self.helper_edits.get(name, {})
            if not any(followed.values()):
                continue  # followed without an edit: the same helper for every call
            for node in self._calls_of(name):
                if id(node) not in followed:
                    raise Blocker(CONSUMER_UNKNOWN, node, f"`{name}` is rewritten for the "
                                  "per-device values another call passes, and this call "
                                  "passes plain values, which the rewrite would change")
        if self.depth:
            return
        # Every use of a helper rewritten here or in a helper followed from here, anywhere in
        # the module, is a call this caller's analysis followed: no other code sees it.
        for name, calls in sorted(self.followed_calls.items()):
            if not any(self.helper_edits.get(name, {}).values()):
                continue
            other = next((n for n in self.module.names.get(name, ())
                          if isinstance(n.ctx, ast.Load) and id(n) not in calls), None)
            if other is not None:
                raise Blocker(CONSUMER_UNKNOWN, other,
                              f"`{name}` would be rewritten for the per-device values a call "
                              f"passes, but it is used elsewhere too (line {other.lineno}), "
                              "where it must stay as it is")


def _is_generator(function: ast.FunctionDef) -> bool:
    """A `def` with a yield of its own (not one of a function or lambda nested in it)."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


# What a module function calls when it builds per-device values of its own.
_PRODUCING = DEVICE_COUNT | DEVICES | REPLICATE | SHARD | {"jax.device_put_sharded", SHARD_PRNG_KEY}


# jax's out-of-place updates, `x.at[index].<method>(...)`: each gives an array shaped like x.
_AT_METHODS = frozenset({"set", "add", "subtract", "multiply", "mul", "divide", "power", "min",
                         "max", "apply"})


def _at_update_base(func) -> ast.AST | None:
    """x of `x.at[index].set` (or another update method); None for anything else."""
    if isinstance(func, ast.Attribute) and func.attr in _AT_METHODS \
            and isinstance(func.value, ast.Subscript) \
            and isinstance(func.value.value, ast.Attribute) and func.value.value.attr == "at":
        return func.value.value.value
    return None


def _bound_in(function: ast.FunctionDef) -> set[str]:
    """The names `function` (or a scope in it) binds: its parameters, stores and defs."""
    return {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
            and not isinstance(n.ctx, ast.Load)} | {
        a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)} | {
        n.name for n in ast.walk(function) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not function}


def _filled_rank(call: ast.Call, name: str) -> int | None:
    """The rank of a fill kept in pmap's stacked layout, `np.zeros((n, a, b))` or `jnp.full(n,
    v)` (a producer only with the device count, or a tuple led by it, as its shape)."""
    if name not in CONSTANT_FILLS or not call.args:
        return None
    shape = call.args[0]
    if isinstance(shape, ast.Tuple):
        return None if any(isinstance(e, ast.Starred) for e in shape.elts) else len(shape.elts)
    return 1
