"""Calls of the global sites themselves in a caller: the in_specs of the arguments (one
argument's spec: argument_specs.py), where the site runs (devices= / axis_size=), and the kind
of its results (merged, stacked, replicated). A mixin of `CallerAnalysis` (dataflow.py holds
the state it reads); `multiprocess.py` overrides `site_call`."""

from __future__ import annotations

import ast
import dataclasses
import re

from transforms.codes.global_view import (
    CALLERS_UNSEEN,
    CONSUMER_UNKNOWN,
    OPTIONS,
    OUTPUT_NOT_REPLICATED,
    PRODUCER_UNKNOWN,
)
from transforms.global_view.ranks import (
    array_results,
    leading_axis_transparent,
    least_result_ranks,
)
from transforms.global_view.module_info import own_returns
from transforms.global_view.record_specs import (
    RECORD_OUT,
    RecordResult,
    parse_record_spec,
    returned_record_edits,
)
from transforms.global_view.replication import NotProvable, result_elements
from transforms.global_view.site_shapes import (
    closed_over,
    defaults_fill,
    free_name_nodes,
    tuple_of_results,
)
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    MERGED_OUT,
    NONE_OUT,
    REPL,
    REPLICATED_OUT,
    ROWS,
    SAME,
    SCALARS_OUT,
    STACKED_OUT,
    STACKED_SPEC,
    Kind,
    describe,
    least_rank,
    stacked_at,
)


class SiteCallsMixin:
    """`CallerAnalysis`'s reading of the calls of its global sites."""

    # -- the step itself ------------------------------------------------------------------
    def site_call(self, call: ast.Call, site: Site) -> Kind:
        """The kind of the call's results; a blocker raised here names `site`, which may fall
        back on its own while the caller stays global (fixpoint.py)."""
        try:
            return self._site_call(call, site)
        except Blocker as blocker:
            if blocker.site is not None:
                raise
            raise dataclasses.replace(blocker, site=site.key) from None

    def _site_call(self, call: ast.Call, site: Site) -> Kind:
        self.site_calls[id(call)] = site
        keywords = self._keyword_arguments(call, site)
        if call.keywords and keywords is None or any(
                isinstance(a, ast.Starred) for a in call.args) and (
                self.depth or site.factory or id(call.func) in self.inline or keywords):
            raise Blocker(CALLERS_UNSEEN, call,
                          f"{site.label} called with keywords or *args")
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        if keywords and len(call.args) != len(site.params) - len(keywords):
            raise Blocker(CALLERS_UNSEEN, call, f"{site.label} called with {len(call.args)} "
                          "positional arguments before its keywords, where its other calls' "
                          f"keywords start after {len(site.params) - len(keywords)}")
        if not starred:
            self._parameter_count(call, site, len(call.args) + len(keywords or ()))
        self._placement(site)
        if any(type(a) is int and a >= 1 for i, a in enumerate(site.in_axes)
               if i not in site.static) and not (self.module.can_stack_results(site)
                                                 and self.module.starts_a_line(site.body)):
            raise Blocker(OPTIONS, site.node, f"{site.label} maps an argument on an axis other "
                          "than 0 and its function is shared with other code (or its first "
                          "statement shares a line), so the body cannot be given the statement "
                          "that drops that axis")
        if starred:  # `*xs`: its elements, each a parameter (lowering.py)
            arguments = self.positional(call, site)
            self._parameter_count(call, site, len(arguments))
        else:  # read one by one, each before the next is evaluated (keywords last, in order)
            arguments = ((argument, None, index) for index, argument in enumerate(
                [*call.args, *(keywords or ())]))
        specs, replicated, ranks, scalars = [], set(), {}, False
        records = {}  # record parameters with fields per-device -> (rebuild form, fields)
        seen = self.expansions[id(call)] = []
        for position, ((argument, kind, index), axis) in enumerate(zip(arguments, site.in_axes)):
            kind = self.eval(argument) if kind is None else kind
            seen.append((argument, kind, index))
            starred = isinstance(argument, ast.Starred)
            if axis is not None and kind.tag == "merged" and least_rank(kind):
                ranks[site.params[position]] = least_rank(kind) - 1
            if position in site.static:  # jit's static argument: no spec, a plain value
                if kind.changed:
                    raise Blocker(PRODUCER_UNKNOWN, argument, f"static argument {position} of "
                                  f"{site.label} holds {describe(kind)}")
                replicated.add(site.params[position])
            elif axis == 0 and kind.scalars and self.per_device_scalars \
                    and leading_axis_transparent(site, self.module.imported):
                specs.append(f"P({AXIS_PLACEHOLDER})")  # each device sees its number as (1,)
                scalars = True
            else:
                spec, whole = self._argument_spec(argument, kind, axis, f"argument {position} "
                                                  f"of {site.label}", None if starred else site)
                specs.append(spec)
                if parse_record_spec(spec) is not None:
                    records[site.params[position]] = parse_record_spec(spec)
                if whole:
                    replicated.add(site.params[position])
        self._read_when_built(site)
        for node in closed_over(site):
            # A closure or partial keyword sees the caller's value as it is: it must keep
            # its layout.
            if self.kinds.get(node.id, SAME).changed:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              f"`{node.id}` ({describe(self.kinds[node.id])})"
                              f" is closed over by the function `{site.name}` maps")
        specs = tuple(specs)
        if self.specs.setdefault(site.key, specs) != specs:
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} is called with different layouts")
        vmapped = vmapped_lambda(site, specs)
        batch = f"P({AXIS_PLACEHOLDER})" in specs  # a merged batch (not stacked rows)
        if vmapped and (scalars or site.out_tree is not None or site.static or batch):
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} maps a lambda over stacked "
                          "rows (jax.vmap over each device's block) and also over a batch, "
                          "per-device numbers, static arguments or an out_axes tree")
        if vmapped and any(_leaves_not_all_stacked(spec) for spec in specs):
            # jax.vmap's in_axes is one per argument: a tree of replicated leaves and merged
            # or stacked ones would be mapped over an axis some leaves do not have. Tried
            # again with those producers kept stacked, the tree is stacked rows throughout.
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} runs as jax.vmap over stacked "
                          "rows, and an argument is a tree whose leaves are not all stacked "
                          "rows", origins=frozenset().union(*(kind.origin for _, kind, _ in seen)))
        if site.opaque and (scalars or batch):
            # A function whose body is not read sees what pmap gave it: one device's row. So
            # the batches' producers may go back to pmap's stacked layout (the caller's
            # analysis tries again with them kept stacked), and it runs as jax.vmap over them.
            origins = frozenset().union(*(kind.origin for _, kind, _ in seen
                                          if kind.tag == "merged"))
            raise Blocker(OPTIONS, call, f"{site.label} maps a function whose body is not read "
                          "(not a lambda, a module-level def or functools.partial of one) over "
                          "a batch or per-device numbers: it can run only as jax.vmap over "
                          "stacked rows, or on replicated values", origins=origins)
        if scalars:
            if site.out_tree is not None:
                raise Blocker(OPTIONS, site.node, f"{site.label} has out_axes and takes one "
                              "number per device")
            return self._scalars_call(call, site, tuple(specs))
        tree = site.out_tree if site.out_tree is not None or not self.split_results \
            else tuple_of_results(site)
        given = {site.params[position]: kind for position, (_, kind, _) in enumerate(seen)}
        if tree is not None:
            return self._result_tree(call, site, replicated, tree, records, given)
        replicated.update(site.params[len(seen):])  # defaults: the same constant everywhere
        varying = self.module.body_analysis(site).first_varying_output(
            replicated, {p: fields for p, (_, fields) in records.items()})
        if isinstance(varying, RecordResult):
            return self._record_result(site, varying, None, None, records, given)
        least = least_result_ranks(site, ranks, self.module.imported) if varying is not None \
            and self.merge_outputs and not site.out_none else None
        if varying is None and vmapped and not site.out_none \
                and self.module.can_stack_results(site):
            # jax.vmap gives each result a device axis: the same value on every device,
            # kept in pmap's stacked layout (`cross_replica_mean = jax.pmap(lambda x:
            # lax.pmean(x, 'x'), 'x')` of stacked batch statistics)
            mode = STACKED_OUT
        elif varying is None:
            mode = REPLICATED_OUT
        elif least and min(least) >= 1:
            mode = MERGED_OUT  # every device's result has a leading axis to merge into
        elif site.out_none:
            raise Blocker(OUTPUT_NOT_REPLICATED, varying,
                          f"{site.label} has out_axes=None but a result "
                          "is not provably the same on every device")
        elif not self.module.can_stack_results(site):
            raise Blocker(OUTPUT_NOT_REPLICATED, varying,
                          f"a result of `{site.name}` is per-device and its "
                          "function is shared with other code, so its results cannot be given "
                          "back with their device axis")
        else:
            mode = STACKED_OUT
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if site.opaque and not vmapped and mode != REPLICATED_OUT:
            raise Blocker(OUTPUT_NOT_REPLICATED, call, f"{site.label} maps a function whose "
                          "body is not read, on values that are not stacked rows")
        if vmapped and mode != STACKED_OUT:
            raise Blocker(OUTPUT_NOT_REPLICATED, varying if varying is not None else call,
                          f"{site.label} maps a lambda over stacked rows (jax.vmap over each "
                          "device's block), which gives every result a device axis, but a "
                          "result is the same on every device")
        if mode == STACKED_OUT:  # the original's layout: stacked per-device rows
            return ROWS if varying is None else self._rows_because(site, varying)
        if site.out_none:
            return SAME  # out_axes=None: unstacked, as the original returns it
        if mode == MERGED_OUT:
            return self._site_output(site, Kind("merged", least=min(least) + 1, placed=True))
        arrays = array_results(site, self.module.imported, self.module.functions)
        if arrays is not None:  # a tree shaped like a parameter: like that argument's stacks
            given = dict(zip(site.params, (kind for _, kind, _ in seen)))
            arrays = [shown if not isinstance(shown, str) else
                      given.get(shown, SAME).tag in ("repl", "merged")
                      and not given[shown].tree
                      for shown in arrays]
        shown = arrays is not None and all(arrays)
        return self._site_output(site, REPL if shown else Kind("repl", tree=True), arrays)

    def _rows_because(self, site: Site, node: ast.AST, position=None) -> Kind:
        """A per-device result in pmap's stacked layout, saying which body value made it so
        (findings where it meets a replicated value: a loop feeding the state back)."""
        which = "a result" if position is None else f"result {position!r}"
        return dataclasses.replace(ROWS, why=(
            f"{which} of {site.label} comes back per-device: `{ast.unparse(node)}` (line "
            f"{node.lineno}) is not provably the same on every device: "
            f"{self.module.body_analysis(site).cause(node)}"))

    def _parameter_count(self, call: ast.Call, site: Site, count: int) -> None:
        if count != len(site.params) and not defaults_fill(site, count):
            raise Blocker(CALLERS_UNSEEN, call,
                          f"{site.label} called with {count} of its "
                          f"{len(site.params)} parameters (pmap fills the rest from defaults "
                          "per call; one in_specs tuple needs every call to pass them all)")

    def _placement(self, site: Site) -> None:
        """pmap's devices= and axis_size= are exact under the caller's mesh only when they
        are every device (jax.devices() / jax.local_devices(): one process) and the device
        count. A module-level site's option is read only as such a call, not through names
        of this function."""
        if site.holder:
            return  # read where the class builds it (classes.py)
        for option, node in site.placement.items():
            direct = site.owner is not None or isinstance(node, ast.Call)
            want = "devices" if option == "devices" else "devcount"
            try:
                kind = self.eval(node) if direct else None
            except Blocker:
                kind = None
            if kind is None or kind.tag != want:
                what = "every device" if option == "devices" else "the device count"
                raise Blocker(OPTIONS, node, f"{site.label} has {option}="
                              f"`{ast.unparse(node)}`, not provably {what}: under the caller's "
                              "mesh over all devices it would run on different devices")

    def _record_result(self, site: Site, result: RecordResult, key, keys, records: dict,
                       given: dict) -> Kind:
        """A record parameter the body gives back rebuilt: it leaves with the spec it came in
        with, so the caller gets the argument's own kind back (a loop feeding it in again
        passes the same layout). Its returns must let the per-device fields be expanded."""
        form, fields = records[result.base]  # every field per-device on entry leaves P(axis)
        for node in own_returns(site.body):
            element = node.value if key is None else \
                (result_elements(node.value, keys) or {}).get(key)
            if element is None or returned_record_edits(
                    element, form, fields, ast.unparse, "jax", "np") is None:
                raise Blocker(OUTPUT_NOT_REPLICATED, node, f"{site.label} gives back the record "
                              f"`{result.base}` as `{ast.unparse(element or node)}`, not a name "
                              "or a rebuild that sets its per-device fields, whose device axis "
                              "the body's return could put back")
        mode = f"{RECORD_OUT}{result.base}"
        if key is None and self.modes.setdefault(site.key, mode) != mode:
            raise Blocker(OUTPUT_NOT_REPLICATED, site.node, f"{site.label} is called with "
                          "different layouts")
        return given[result.base]

    def _result_tree(self, call: ast.Call, site: Site, replicated: set[str], tree,
                     records: dict | None = None, given: dict | None = None) -> Kind:
        """`out_axes=(0, None, ...)` (`tree`: the site's, or (0, 0, ...) for a body returning a
        tuple literal): per result, None needs a proven-replicated value (P(), unstacked as in
        the original); 0 is P() when proven (a replicated stack in the original) and otherwise
        keeps its device axis (expanded in the body, P(axis))."""
        if isinstance(tree, int):  # one out_axes k >= 1: the result keeps pmap's layout
            if not self.module.can_stack_results(site):
                raise Blocker(OUTPUT_NOT_REPLICATED, site.node,
                              f"`{site.name}` has out_axes={tree} and its "
                              "function is shared with other code, so its results cannot be "
                              "given back with their device axis")
            mode = stacked_at(tree)
            if self.modes.setdefault(site.key, mode) != mode:
                raise Blocker(OUTPUT_NOT_REPLICATED, call,
                              f"{site.label} is called with different layouts")
            return SAME
        axes = dict(enumerate(tree)) if isinstance(tree, tuple) else tree
        try:
            varying = self.module.body_analysis(site).varying_results(
                replicated, list(axes), {p: fields for p, (_, fields) in (records or {}).items()})
        except NotProvable as error:
            raise Blocker(OUTPUT_NOT_REPLICATED, error.node,
                          f"{site.label}: {error.why}") from None
        modes, fields = [], []
        for position, axis in axes.items():
            node = varying[position]
            if isinstance(node, RecordResult) and axis == 0:
                fields.append((f"[{position!r}]", self._record_result(
                    site, node, position, list(axes), records, given)))
                modes.append(f"{RECORD_OUT}{node.base}")
                continue
            if isinstance(node, RecordResult):  # out_axes None / k >= 1 of a record
                raise Blocker(OUTPUT_NOT_REPLICATED, site.node, f"result {position!r} of "
                              f"{site.label}, the record `{node.base}` given back, has "
                              f"out_axes {axis}")
            if axis not in (0, None):  # out_axes k >= 1: keeps pmap's layout, P(None, ..., axis)
                if not self.module.can_stack_results(site):
                    raise Blocker(OUTPUT_NOT_REPLICATED, site.node,
                                  f"result {position!r} of `{site.name}` has "
                                  f"out_axes {axis} and its function is shared with other code")
                modes.append(stacked_at(axis))
            elif node is None and axis == 0 and (id(call), position) in self.keep_stacked \
                    and self.module.can_stack_results(site):
                # a replicated result a consumer cannot read as a global value (a loop joins it
                # with a plain value): given back in pmap's stacked layout, n equal rows
                modes.append(STACKED_OUT)
            elif node is None:
                modes.append(NONE_OUT if axis is None else REPLICATED_OUT)
            elif axis is None:
                raise Blocker(OUTPUT_NOT_REPLICATED, node,
                              f"result {position} of {site.label} has out_axes "
                              "None but is not provably the same on every device")
            elif not self.module.can_stack_results(site):
                raise Blocker(OUTPUT_NOT_REPLICATED, node,
                              f"result {position} of `{site.name}` is per-device "
                              "and its function is shared with other code, so it cannot be "
                              "given back with its device axis")
            else:
                modes.append(STACKED_OUT)
            rows = ROWS if node is None else self._rows_because(site, node, position)
            replicated = Kind("repl", origin=frozenset({(id(call), position)}))
            fields.append((f"[{position!r}]", replicated if modes[-1] == REPLICATED_OUT else
                           rows if modes[-1] == STACKED_OUT else SAME))
        mode = tuple(modes)
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if not any(kind.changed or kind.rows for _, kind in fields):
            return SAME
        return Kind("fields", fields=tuple(fields))

    def _scalars_call(self, call: ast.Call, site: Site, specs) -> Kind:
        """One number per device, into a body that only combines numbers elementwise (and
        with psum-like collectives): each device computes on its (1,) block what pmap
        computed on the number, and out_specs P(axis) gives back pmap's (n,) layout."""
        if any(s == "P()" for s in specs):
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} mixes per-device scalars with "
                          "replicated arguments")
        if self.specs.setdefault(site.key, specs) != specs:
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} is called with different layouts")
        if self.modes.setdefault(site.key, SCALARS_OUT) != SCALARS_OUT:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        for argument in call.args:
            if not self.eval(argument).scalars:
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{site.label} mixes per-device scalars with "
                              "other arguments")
        return SAME  # pmap's layout: one result per device along the leading axis

    def _site_output(self, site: Site, leaf: Kind, arrays: list[bool] | None = None) -> Kind:
        """A tuple literal returned by the body is a tuple of results: its elements can be
        unpacked or indexed one by one (`arrays`: which of them the body shows are arrays)."""
        body = site.body
        value = body.body if isinstance(body, ast.Lambda) else \
            next((s.value for s in body.body if isinstance(s, ast.Return)), None)
        if isinstance(value, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in value.elts):
            if arrays is not None and len(arrays) == len(value.elts):
                return Kind("fields", fields=tuple(
                    (f"[{i}]", REPL if shown else Kind("repl", tree=True))
                    for i, shown in enumerate(arrays)))
            return Kind("fields", fields=tuple((f"[{i}]", leaf) for i in range(len(value.elts))))
        return leaf

    def _keyword_arguments(self, call: ast.Call, site: Site) -> list | None:
        """The values of a call's keywords in the order of the site's `keyword_params`, when
        they are exactly those (pmap maps each on axis 0); None when the call passes others."""
        given = {k.arg: k.value for k in call.keywords}
        if sorted(given) != sorted(site.keyword_params) or None in given:
            return None
        return [given[name] for name in site.keyword_params]

    def _read_when_built(self, site: Site) -> None:
        """A site with static arguments or keyword calls becomes a jitted def where it was
        built, and its body reads the partial's arguments at each trace, not once when pmap's
        partial was made:
        each name they read must be bound at most once in this function, so that both reads
        see the same value (`scale = 5.0` after the site would change the migrated step)."""
        function = site.function_node
        if not ((site.static or site.keyword_params) and site.owner
                and isinstance(function, ast.Call)):
            return
        stores = {}
        for node in ast.walk(self.function):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                stores[node.id] = stores.get(node.id, 0) + 1
            elif isinstance(node, ast.arg):
                stores[node.arg] = stores.get(node.arg, 0) + 1
        for node in free_name_nodes(function):
            if stores.get(node.id, 0) > 1:
                raise Blocker(OPTIONS, node, f"`{node.id}`, which {site.label}'s "
                              "functools.partial reads when it is built, is bound again in "
                              f"`{self.function.name}`: the jitted def a site with static "
                              "arguments or keyword calls becomes would read it at each trace "
                              "instead")


_MERGED_LEAF = re.compile(re.escape(f"P({AXIS_PLACEHOLDER})") + f"(?!{re.escape(STACKED_SPEC)})")


def _leaves_not_all_stacked(spec: str) -> bool:
    """A spec other than P() with a replicated (P()) or a merged leaf in it."""
    return spec != "P()" and ("P()" in spec or _MERGED_LEAF.search(spec) is not None)


def vmapped_lambda(site: Site, specs) -> bool:
    """A lambda given stacked rows runs as `jax.vmap(lambda ...)` over each device's (1, ...)
    block: vmap drops that axis on the way in and gives every result it back, as pmap's slice
    and stacked output had them (its other arguments are replicated: in_axes None)."""
    return isinstance(site.body, ast.Lambda) and any(s.endswith(STACKED_SPEC) for s in specs)

