"""`--style global` in multi-process modules (research: jax_semantics.md §2.2 items 8-9, §6).

Every process runs the same program. pmap took each process's host-local rows (leading axis
its local device count), ran over the devices of all processes, and gave each process its
host-local rows back. The global style keeps that contract with one mesh over all global
devices (`jax.device_count()`, as in one process) and these edits in the callers:
- a per-device batch is the process's own rows: it stays host-local, merged as in one process,
  and becomes one global array at the step call with
  `jax.make_array_from_process_local_data(NamedSharding(mesh, P(axis)), local_batch)`;
- a replicated value is placed with `jax.device_put(value, P())`. That is exact only when every
  process places the same value, so a stack whose value can differ between processes (it reads
  `jax.process_index()`, a device's `process_index`, a clock, the global numpy / stdlib random
  state, the environment, a parameter, or a module function or name that does; see
  process_dependence.py) keeps pmap's stacked layout instead (PM611): each process's own rows,
  made global at the call with `multihost_utils.host_local_array_to_global_array` (on the
  buffers they have, so a donated stack is consumed as pmap consumed it) and squeezed in the
  body; where it cannot, the function keeps pmap's contract (PM607), never a guess;
- replicated results are fully replicated global arrays: host reads stay plain reads;
- per-device results (out_specs P(axis)) are global arrays of every process's rows, so they
  are turned back into the process's own rows at the call with
  `multihost_utils.global_array_to_host_local_array`, where the original read its host-local
  rows;
- a host value that only steps read, each converting it the same way, is converted once where
  it is bound (`params = jax.device_put({...}, ...)`, or `batch = ...(batch)` first in a
  loop's body) instead of at every call: placement_bindings.py says which names qualify;
- code that some process may skip (under a process-dependent condition, or in a caller some
  process may not call; process_dependence.py) runs its steps as pmap ran them: a step waits
  for the other processes only where pmap's did. It gets no wait of its own: a replicated
  value made there keeps pmap's stacked layout (no `device_put(v, P())`, which waits for
  every process), except as an argument of a step that waits for every process anyway
  (collective_waits.py). A step with collectives under a condition that reads a process's
  index (`if jax.process_index() == 0:`) cannot run on several processes in the original
  either: that function stays faithful (PM607), and the finding says why.
Host barriers built from a pmapped psum are left to the faithful rule (PM503), which writes
`multihost_utils.sync_global_devices` and no pmap, so they do not keep their caller faithful.
"""

from __future__ import annotations

import ast

from transforms.codes.global_view import UNAVAILABLE
from transforms.global_view.call_layout import Nested, call_text
from transforms.global_view.collective_waits import has_collectives, waits_for_every_process
from transforms.global_view.dataflow import CallerAnalysis
from transforms.global_view.donation_values import donated_positions
from transforms.global_view.lowering import compiled_aliases, compiled_site
from transforms.global_view.placement_bindings import Binding, placement_bindings
from transforms.global_view.process_dependence import ProcessDependence
from transforms.global_view.sites import Blocker, Site, dotted
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    DEVICE_COUNT,
    DEVICES,
    MESH_PLACEHOLDER,
    REPLICATED_OUT,
    STACKED_OUT,
    STACKED_SPEC,
    Kind,
    placed,
)
from transforms.reading.snippets import shorten

PSUM = "jax.lax.psum"
STATIC = "static"  # the spec `_argument_groups` gives a static argument (it has none)
ONES = {"jax.numpy.ones", "numpy.ones"}
WAITS = {"jax.block_until_ready", "jax.device_get"}
NAMES = ("NamedSharding", "multihost_utils")  # names the multi-process edits use


def host_barrier_sites(sites: list[Site], tree: ast.Module, imported) -> set[str]:
    """Keys of inline sites that are host barriers the faithful rule (host_barriers.py)
    rewrites to `sync_global_devices`: `jax.pmap(lambda x: jax.lax.psum(x, axis), axis)(ones)`,
    `ones` being `jnp.ones(jax.local_device_count())` (or a name bound to it just before in
    the same block), its value thrown away (possibly through `.block_until_ready()`). A
    subset of that rule's forms: anything else stays a site."""
    found = set()
    statements = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for index, statement in enumerate(block):
                    statements[id(statement)] = (block, index)
    holders: dict[int, ast.Expr] | None = None
    for site in sites:
        if not site.inline or not isinstance(site.statement, ast.Call):
            continue
        call = site.statement  # the inline site's statement is the call of the pmap
        if holders is None:
            holders = _holders(tree, imported)
        holder = holders.get(id(call))
        if holder is None or id(holder) not in statements:
            continue
        if _is_psum_barrier(site, imported) and _is_local_ones(
                call.args[0], statements[id(holder)], imported):
            found.add(site.key)
    return found


def _holders(tree: ast.Module, imported) -> dict[int, ast.Expr]:
    """id of a call -> the first expression statement (in `ast.walk` order) whose value is
    that call or waits on it (`_waited_calls`). One walk for every inline site: a walk per site
    was quadratic on a module of hundreds of top-level `jax.pmap(...)(x)`."""
    holders: dict[int, ast.Expr] = {}
    for statement in ast.walk(tree):
        if isinstance(statement, ast.Expr):
            for call in _waited_calls(statement.value, imported):
                holders.setdefault(id(call), statement)
    return holders


def _waited_calls(value, imported) -> list:
    """What `value` waits on: itself, `x` of `x.block_until_ready()`,
    and `x` of `jax.block_until_ready(x)` / `jax.device_get(x)`."""
    waited = [value]
    if isinstance(value, ast.Call) and not value.args and not value.keywords \
            and isinstance(value.func, ast.Attribute) and value.func.attr == "block_until_ready":
        waited.append(value.func.value)
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords \
            and dotted(value.func, imported) in WAITS:
        waited.append(value.args[0])
    return waited


def _is_psum_barrier(site: Site, imported) -> bool:
    body = site.body
    options = site.node
    return (isinstance(body, ast.Lambda) and len(site.params) == 1 and site.axis_name is not None
            and site.donate is None and len(options.keywords) <= 1
            and all(k.arg == "axis_name" for k in options.keywords)
            and isinstance(body.body, ast.Call) and dotted(body.body.func, imported) == PSUM
            and len(body.body.args) + len(body.body.keywords) == 2
            and isinstance(body.body.args[0], ast.Name) and body.body.args[0].id == site.params[0]
            and len(site.statement.args) == 1 and not site.statement.keywords)


def _is_local_ones(value, where, imported) -> bool:
    block, index = where
    if isinstance(value, ast.Name):
        assigned = None
        for statement in block[:index]:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) \
                    and statement.targets[0].id == value.id:
                assigned = statement.value
        value = assigned
    if not (isinstance(value, ast.Call) and dotted(value.func, imported) in ONES
            and len(value.args) == 1 and not value.keywords):
        return False
    size = value.args[0]
    if isinstance(size, (ast.List, ast.Tuple)) and len(size.elts) == 1:
        size = size.elts[0]
    return isinstance(size, ast.Call) and not size.args and not size.keywords \
        and dotted(size.func, imported) == "jax.local_device_count"


def uniform(mode):
    """A step's result mode, one tuple entry per result, as one mode where all agree: every
    result replicated is REPLICATED_OUT, every result a per-device stack is STACKED_OUT."""
    if isinstance(mode, tuple) and mode and len(set(mode)) == 1 \
            and mode[0] in (REPLICATED_OUT, STACKED_OUT):
        return mode[0]
    return mode


def mode_text(mode) -> str:
    """How a finding names a result mode."""
    if isinstance(mode, tuple):
        return ", ".join(str(m) for m in mode)
    return str(mode)


class MultiProcessCallerAnalysis(CallerAnalysis):
    """A caller in a multi-process module: `CallerAnalysis` with the edits and blockers above."""

    # Per-device results come back as each process's own rows (pmap's stacked layout), and
    # batches stay host-local until the step's call makes them global.
    merge_outputs = False
    per_device_scalars = False
    # A stack (pmap's layout, leading axis the local device count) is the process's own rows,
    # made one global array at the step's call, as a batch is; the body squeezes its row.
    stacked_arguments = True
    report_first_cause = True  # no per-site demotion here: the cause is the better finding
    batches_placed = False

    def __init__(self, function, sites, module, parameters=None, depth=0):
        super().__init__(function, sites, module, parameters, depth)
        self.dependence: ProcessDependence = module.process_dependence
        self._tainted: dict[frozenset, set[str]] = {}
        # Names whose conversion may move to their binding (placement_bindings.py), and how
        # each of their reads is converted at its call: (function, other arguments, where the
        # value goes), None where it is not converted or is donated.
        self.bindings: dict[str, Binding] = {} if depth else \
            placement_bindings(function, module.tree)
        self.conversions: dict[str, dict[int, tuple | None]] = {}
        self._conditional: dict[frozenset, dict[int, ast.AST]] = {}

    @property
    def tainted(self) -> set[str]:
        """Names that can differ between processes. A step's results count as the same
        everywhere only once its calls are known to return replicated results (P(), fully
        replicated); per-device results come back as each process's own rows."""
        replicated = []
        aliases = compiled_aliases(self.function, self.sites)  # `.lower(...).compile()`
        for node in ast.walk(self.function):
            if not isinstance(node, ast.Call):
                continue
            site = self.sites.get(node.func.id) or aliases.get(node.func.id) \
                if isinstance(node.func, ast.Name) else None
            site = site or self.inline.get(id(node.func)) or compiled_site(node.func, self.sites)
            if site is not None and (site.out_none or uniform(self.modes.get(site.key)) ==
                                     REPLICATED_OUT):
                replicated.append(id(node))
        key = frozenset(replicated)
        if key not in self._tainted:
            self._tainted[key] = self.dependence.tainted_names(self.function, key)
        return self._tainted[key]

    # -- where the step runs --------------------------------------------------------------
    def _condition(self, node: ast.AST) -> tuple[ast.AST, bool] | None:
        """(the condition, whether it reads a process's index) under which `node` runs on some
        processes only, or None where every process runs it."""
        tainted = self.tainted
        key = frozenset(tainted)
        if key not in self._conditional:
            self._conditional[key] = self.dependence.conditional_nodes(self.function, tainted)
        condition = self._conditional[key].get(id(node))
        if condition is not None:
            return condition, self.dependence.tells_apart(condition, self.function)
        return self.module.sometimes_called.get(self.function.name)

    def _skipped_because(self, condition: ast.AST) -> str:
        """How a finding names the condition a node runs under."""
        where = f"`{ast.unparse(condition)}` holds (line {condition.lineno})"
        if self._enclosing(condition):
            return f"`{self.function.name}` runs only where {where}"
        return f"it runs only where {where}"

    def _enclosing(self, condition: ast.AST) -> bool:
        """Whether `condition` is outside the function: it decides whether the function runs."""
        return self.module.sometimes_called.get(self.function.name, (None,))[0] is condition

    def _run(self):
        try:
            return super()._run()
        except _ConvertAtEachCall as failed:  # analysed again, converting it at each call
            again = type(self)(self.function, self.all_sites, self.module)
            for flag in ("merge_outputs", "split_results", "keep_stacked"):
                setattr(again, flag, getattr(self, flag))
            again.unhoisted = self.unhoisted | {failed.name}
            return again._run()

    def _analyse_body(self) -> None:
        super()._analyse_body()
        for name, reads in self.conversions.items():
            binding = self.bindings[name]
            how = set(reads.values())
            if set(reads) == binding.reads and len(how) == 1 and None not in how:
                self._convert_at_binding(binding, how.pop())
            elif how - {None}:  # some reads were written bare: not so, after all
                raise _ConvertAtEachCall(name)

    # -- producers ------------------------------------------------------------------------
    def producer(self, call: ast.Call, name: str) -> Kind | None:
        kind = super().producer(call, name)
        if kind is not None and kind.tag == "repl" and id(call) not in self.keep_stacked:
            differing = self._differing(call)
            skipped = self._condition(call) if differing is None else None
            if differing is not None:  # it may stay each process's own rows: pmap's layout
                self.module.process_stacked[id(call)] = (
                    f"`{shorten(ast.unparse(call), 40)}` (line {call.lineno}) is replicated, but "
                    f"`{ast.unparse(differing)}` can differ between processes")
                self._same_on_every_process(call, origins=frozenset({id(call)}),
                                            differing=differing)
            elif skipped is not None:  # placing it with P() would wait for every process
                reason = (f"`{shorten(ast.unparse(call))}` (line {call.lineno}) is replicated in "
                          f"the original, but {self._skipped_because(skipped[0])}, which can "
                          "differ between processes, and a value placed with P() waits for "
                          "every process to place it")
                self.module.process_stacked[id(call)] = \
                    f"{reason}: each process's own rows are kept instead"
                raise Blocker(UNAVAILABLE, call, f"{reason}: kept in the faithful style "
                              "(multi-process)", origins=frozenset({id(call)}))
            text = self.render(call)
            if not text.startswith(f"{self.module.jax}.device_put("):
                self._edit(call, placed(self.module.jax, text, "P()"))
        return kind

    def _dict(self, node: ast.Dict) -> Kind:
        """A dict literal of replicated values each placed with P() is placed as one tree:
        `jax.device_put({"w": w, "b": b}, NamedSharding(mesh, P()))`."""
        kind = super()._dict(node)
        if kind.tag != "repl" or None in node.keys:
            return kind
        prefix = f"{self.module.jax}.device_put("
        suffix = f", NamedSharding({MESH_PLACEHOLDER}, P()))"
        values = []
        for value in node.values:
            text = self.edits.get(self.module.span(value))
            if text is None or not (text.startswith(prefix) and text.endswith(suffix)):
                return kind
            values.append((value, text[len(prefix):-len(suffix)]))
        for value, text in values:
            self._edit(value, text)
        line = self.module.source.splitlines()[node.lineno - 1].decode("utf-8")
        tail = len(line) - node.end_col_offset if node.end_lineno == node.lineno else 0
        self._edit(node, call_text(prefix[:-1], [self.render(node), suffix[2:-1]],
                                   line[:len(line) - len(line.lstrip())], node.col_offset, tail))
        return kind

    def placed_batch(self, text: str) -> str:
        return text  # host-local rows; made global where the step is called

    def _same_on_every_process(self, node, what="is replicated in the original",
                               origins: frozenset = frozenset(), differing=None) -> None:
        """`device_put(value, P())` assumes every process passes the same value. `origins`:
        the producers that may keep pmap's stacked layout instead (dataflow.run);
        `differing`: what `_differing(node)` gave, where the caller has it already."""
        child = differing if differing is not None else self._differing(node)
        if child is not None:
            raise Blocker(UNAVAILABLE, node, f"`{ast.unparse(node)}` {what}, but "
                          f"`{ast.unparse(child)}` can differ between "
                          "processes, so one value placed with P() is not proven: kept "
                          "in the faithful style (multi-process)", origins=origins)

    def _differing(self, node) -> ast.AST | None:
        """The first part of `node` whose value can differ between processes, or None."""
        for child in ast.walk(node):
            if isinstance(child, ast.Call) and dotted(child.func, self.module.imported) in (
                    DEVICE_COUNT | DEVICES):
                continue
            if isinstance(child, ast.Name) and self.kinds.get(child.id) is not None \
                    and self.kinds[child.id].tag in ("devcount", "devices"):
                continue  # the count is gone once the value is unstacked
            if isinstance(child, ast.Name) and child.id in self.kinds \
                    and self.kinds[child.id].tag == "repl":
                continue  # already placed, the same everywhere
            if self.dependence._source(child, self.tainted):
                return child
        return None

    def kept_stacked_reason(self, producer) -> str | None:
        return self.module.process_stacked.get(id(producer)) or super().kept_stacked_reason(
            producer)

    # -- the step -------------------------------------------------------------------------
    def site_call(self, call: ast.Call, site: Site) -> Kind:
        skipped = self._condition(call)
        if skipped is not None and skipped[1] and has_collectives(site, self.module.imported):
            raise Blocker(UNAVAILABLE, skipped[0] if self._enclosing(skipped[0]) else call,
                          f"{site.label} is called only on some processes "
                          f"({self._skipped_because(skipped[0])}, which reads the process "
                          "index): its collectives wait for the other processes, in the "
                          "original too; kept in the faithful style (multi-process)")
        meeting = skipped is None or (not skipped[1] and waits_for_every_process(
            site, self.module.imported))  # every process makes this call, or none
        if site.placement:
            given = " / ".join(f"{option}=" for option in site.placement)
            raise Blocker(UNAVAILABLE, site.node,
                          f"{site.label} runs on the devices its {given} picks at run time, "
                          "not on every process's devices: kept in the faithful style, whose "
                          "mesh is those devices (multi-process)")
        if site.out_tree is not None or any(
                axis not in (0, None) for i, axis in enumerate(site.in_axes)
                if i not in site.static):
            raise Blocker(UNAVAILABLE, site.node,
                          f"{site.label} uses pmap options the multi-process "
                          "global style does not handle yet (out_axes or in_axes trees or "
                          "axes other than 0): kept in the faithful "
                          "style (multi-process)")
        kind = super().site_call(call, site)
        mode, specs = uniform(self.modes[site.key]), self.specs[site.key]
        if any(spec.replace(STACKED_SPEC, "") not in ("P()", f"P({AXIS_PLACEHOLDER})")
               for spec in specs):
            raise Blocker(UNAVAILABLE, call,
                          f"{site.label} has mapped axes other than 0: not handled in "
                          "multi-process modules yet, kept in the faithful style "
                          "(multi-process)")
        if mode not in (REPLICATED_OUT, STACKED_OUT):
            raise Blocker(UNAVAILABLE, call,
                          f"the results of {site.label} have mixed layouts ({mode_text(mode)}): "
                          "not handled in multi-process modules yet, kept in the faithful "
                          "style (multi-process)")
        jax = self.module.jax
        arguments, keywords = [], {}
        donated = donated_positions(site)
        for argument, spec, axis, kinds, starred, filled, keyword in self._argument_groups(
                call, site):
            text = self.render(argument)
            conversion = None
            if spec is STATIC:
                pass  # jit's static argument: a plain value, as pmap's static_broadcasted one
            elif spec == "P()":
                if axis is None:
                    self._same_on_every_process(
                        argument, "is given to every device (in_axes None) in the original")
                    if any(kind.tag != "repl" for kind in kinds):
                        if not meeting:
                            raise Blocker(UNAVAILABLE, argument, (
                                f"`{ast.unparse(argument)}` would be placed with P() for "
                                f"{site.label}, but {self._skipped_because(skipped[0])}, "
                                "which can differ between processes, and a placement waits "
                                "for every process: kept in the faithful style (multi-process)"))
                        conversion = (f"{jax}.device_put",
                                      (f"NamedSharding({MESH_PLACEHOLDER}, P())",), 0)
            elif STACKED_SPEC in spec:
                # A stack: the process's own rows, one per local device. Made global on the
                # buffers it has where it is already spread over them (a step's result), so a
                # donated stack is consumed as pmap consumed it.
                text = Nested("multihost_utils.host_local_array_to_global_array",
                              [text, MESH_PLACEHOLDER, f"P({AXIS_PLACEHOLDER})"])
            else:  # a batch: the process's own rows, merged
                conversion = (f"{jax}.make_array_from_process_local_data",
                              (f"NamedSharding({MESH_PLACEHOLDER}, {spec})",), 1)
            if self._converted_at_binding(argument, conversion, bool(filled & donated)):
                pass  # the name holds the converted value already
            elif conversion is not None:
                text = Nested(conversion[0], _with_value(conversion, text))
            if starred:
                text = text._replace(prefix="*") if isinstance(text, Nested) else f"*{text}"
            if keyword is not None:  # passed by keyword, as the call passed it
                keywords[keyword] = text._replace(prefix=f"{keyword}=") \
                    if isinstance(text, Nested) else f"{keyword}={text}"
            else:
                arguments.append(text)
        arguments += [keywords[k.arg] for k in call.keywords]
        line = self.module.source.splitlines()[call.lineno - 1].decode("utf-8")
        indent = line[:len(line) - len(line.lstrip())]
        tail = len(line) - call.end_col_offset if call.end_lineno == call.lineno else 0
        if mode == STACKED_OUT and id(call) not in self.lowerings:
            # The process's own rows of every per-device result, as pmap returned them.
            inner = call_text(self.render(call.func), arguments, indent + "    ",
                              len(indent) + 4, 1, site.axis_name)
            outer = [inner, MESH_PLACEHOLDER, f"P({AXIS_PLACEHOLDER})"]
            function = "multihost_utils.global_array_to_host_local_array"
            text = call_text(function, outer, indent, call.col_offset, tail) \
                if "\n" not in inner else \
                f"{function}(\n" + "".join(f"{indent}    {a},\n" for a in outer) + f"{indent})"
        else:
            text = call_text(self.render(call.func), arguments, indent, call.col_offset,
                             tail, site.axis_name)
        self._edit(call, text)
        return kind

    def _argument_groups(self, call: ast.Call, site: Site):
        """(argument, its spec, its in_axes entry, the kinds it passes, starred, the positions
        it fills, its keyword or None) of each argument of the call: a `*xs` argument is made
        global as one tree (the functions the edits use take trees), so every parameter it
        fills must have the same spec and in_axes entry."""
        filled: dict[int, list] = {}
        specs = iter(self.specs[site.key])  # none for static arguments
        for position, ((_, kind, index), axis) in enumerate(zip(
                self.expansions[id(call)], site.in_axes)):
            spec = STATIC if position in site.static else next(specs)
            filled.setdefault(index, []).append((spec, axis, kind, position))
        by_keyword = self._keyword_arguments(call, site) or []  # after the positional ones
        names = [*(None for _ in call.args), *site.keyword_params[:len(by_keyword)]]
        for index, argument in enumerate([*call.args, *by_keyword]):
            entries = filled.get(index)
            if not entries:
                continue  # `*()`: nothing to place
            if len({(spec, axis) for spec, axis, _, _ in entries}) > 1:
                raise Blocker(UNAVAILABLE, argument,
                              f"`{ast.unparse(argument)}` fills parameters of {site.label} "
                              "with different layouts: each would be made global apart, which "
                              "the multi-process global style does not write")
            starred = isinstance(argument, ast.Starred)
            yield (argument.value if starred else argument, entries[0][0], entries[0][1],
                   [entry[2] for entry in entries], starred, {entry[3] for entry in entries},
                   names[index])

    # -- a conversion made once, where the name is bound (placement_bindings.py) ------------
    def _converted_at_binding(self, argument, conversion, donated: bool) -> bool:
        """Whether `argument`, a read of a name converted where it is bound, goes in bare.
        Every such read is recorded, so that `_analyse_body` can check they all agree."""
        binding = self.bindings.get(argument.id) if isinstance(argument, ast.Name) else None
        if binding is None or argument.id in self.unhoisted or id(argument) not in binding.reads:
            return False
        statement = binding.statement
        where = statement if isinstance(statement, ast.Assign) else statement.body[0]
        if conversion is not None and conversion[0].endswith(".device_put") \
                and self._condition(where) is not None:
            return False  # a placement there could wait for processes that never get there
        how = None if donated else conversion
        self.conversions.setdefault(argument.id, {})[id(argument)] = how
        return how is not None

    def _convert_at_binding(self, binding: Binding, conversion) -> None:
        """`name = convert(value)`, or, for a loop's target, `name = convert(name)` first in
        the loop's body."""
        statement, lines = binding.statement, self.module.source.splitlines()
        if isinstance(statement, ast.Assign):
            value = statement.value
            line = lines[statement.lineno - 1].decode("utf-8")
            indent = line[:len(line) - len(line.lstrip())]
            tail = len(line) - value.end_col_offset if value.end_lineno == value.lineno else 0
            rendered = self.render(value)
            moved = _moved(rendered, value, len(indent) + 4 - value.col_offset)
            if moved is not None:  # a value of several lines gets lines of its own
                arguments = _with_value(conversion, moved)
                text = f"{conversion[0]}(\n" + "".join(
                    f"{indent}    {a},\n" for a in arguments) + f"{indent})"
            else:
                text = call_text(conversion[0], _with_value(conversion, rendered), indent,
                                 value.col_offset, tail)
            self._edit(value, text)
            return
        first = statement.body[0]
        indent = lines[first.lineno - 1].decode("utf-8")[:first.col_offset]
        head = f"{binding.name} = "
        text = call_text(conversion[0], _with_value(conversion, binding.name), indent,
                         len(indent) + len(head), 0)
        self._edit(first, f"{head}{text}\n{indent}{self.render(first)}")


class _ConvertAtEachCall(Exception):
    """A name's reads were written bare, expecting its conversion at the binding, but some
    read turned out to need another (or none): the analysis runs again without moving it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _moved(text: str, node, shift: int) -> str | None:
    """`text`, the source of `node` over several lines, with its lines after the first moved
    `shift` columns (to start on a line of its own); None when it is one line, or holds a
    string of several lines, or a line has too little indentation to move left."""
    lines = text.split("\n")
    if len(lines) == 1 or any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                              and n.lineno != n.end_lineno for n in ast.walk(node)):
        return None
    moved = [lines[0]]
    for line in lines[1:]:
        if shift >= 0 or not line.strip():
            moved.append(" " * shift + line if line.strip() else line)
        elif line[:-shift].strip():
            return None
        else:
            moved.append(line[-shift:])
    return "\n".join(moved)


def _with_value(conversion, value: str) -> list:
    """The arguments of a conversion `(function, other arguments, the value's index)`."""
    arguments = list(conversion[1])
    arguments.insert(conversion[2], value)
    return arguments



def process_idiom_findings(function: ast.FunctionDef, module) -> list[tuple[ast.AST, str]]:
    """(node, message) of the per-process idioms in a global caller (PM506, info), said for the
    global style; the faithful rule (process_idioms.py) reports the same nodes in its terms."""
    indices = {"jax.process_index", "jax.host_id"}
    imported = module.imported
    names = {t.id for s in ast.walk(function) if isinstance(s, ast.Assign)
             and isinstance(s.value, ast.Call) and not s.value.args
             and dotted(s.value.func, imported) in indices
             for t in s.targets if isinstance(t, ast.Name)}

    def is_index(node) -> bool:
        return (isinstance(node, ast.Call) and not node.args
                and dotted(node.func, imported) in indices) or (
            isinstance(node, ast.Name) and node.id in names)

    def mentions(node) -> bool:
        return any(is_index(n) for n in ast.walk(node))

    site_names = {site.name for site in getattr(module, "sites", {}).values()}
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and dotted(node.func, imported) == "jax.random.fold_in" \
                and len(node.args) == 2 and mentions(node.args[1]):
            found.append((node, "per-process RNG", (
                "each process draws its own stream; what differs per process keeps its rows (PM611)")))
        elif isinstance(node, ast.Subscript) and mentions(node.slice) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "shard" and any(mentions(a) for a in node.args)):
            found.append((node, "per-process data selection", (
                "these rows are this process's part of the global batch "
                "(jax.make_array_from_process_local_data at the step call)")))
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq):
            sides = (node.test.left, node.test.comparators[0])
            if any(is_index(s) for s in sides) and any(
                    isinstance(s, ast.Constant) and s.value == 0 and type(s.value) is int
                    for s in sides):
                steps = sorted({n.func.id for b in [*node.body, *node.orelse] for n in ast.walk(b)
                                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                                and n.func.id in site_names})
                called = "" if not steps else (
                    f"; {', '.join(f'`{s}`' for s in steps)} there "
                    f"{'has' if len(steps) == 1 else 'have'} no collectives")
                found.append((node.test, "block run on process 0 only,", (
                    f"replicated results are read there without a collective{called}")))
    return [(node, f"{what} `{shorten(_text(module, node))}` kept: {why}")
            for node, what, why in found]


def _text(module, node) -> str:
    start, end = module.span(node)
    return module.source[start:end].decode("utf-8")
