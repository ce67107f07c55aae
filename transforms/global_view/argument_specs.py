"""The in_specs of one argument of a global site's call: in_axes 0 / None, or a dict / tuple
tree of them matched against the argument's fields, and pmap's stacked layout kept (P(axis),
squeezed in the body) where the argument's leading axis is provably the device count, and
why an argument built from the device count cannot be merged. A mixin of `CallerAnalysis`
(dataflow.py holds the state it reads); site_calls.py reads each call's arguments with it."""

from __future__ import annotations

import ast

from transforms.codes.global_view import PRODUCER_UNKNOWN
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.stacked_rows import vmapped_arguments
from transforms.global_view.values import (
    AS_ARRAY,
    AXIS_PLACEHOLDER,
    BROADCAST_TO,
    CONSTANT_FILLS,
    DEVICE_COUNT,
    SAME,
    ELEMENTWISE_FUNCTIONS,
    SHARD_PRNG_KEY,
    STACKED_SPEC,
    Kind,
    quoted,
)


class ArgumentSpecsMixin:
    """`CallerAnalysis`'s in_specs of the arguments of its global sites' calls."""

    def _argument_spec(self, argument, kind: Kind, axis, what: str,
                       site: Site | None = None) -> tuple[str, bool]:
        """(in_specs text, the same on every device) of one argument whose in_axes entry is
        `axis`: 0 / None, or a dict / tuple tree of them matched against the argument's
        fields (a dict or tuple literal of values of known layouts). `site`: given for a
        whole argument, which may stay stacked (`_stacked_spec`)."""
        if kind.tag == "record":  # fields of mixed layouts (records.py)
            return self._record_spec(argument, kind, what, site, axis), False
        if axis == 0 and _all_replicated(kind):  # a tuple / list of replicated stacks
            return "P()", True
        if isinstance(axis, (dict, tuple)):
            if isinstance(axis, dict):
                steps = [(f"[{key!r}]", key, sub) for key, sub in axis.items()]
            else:
                steps = [(f"[{i}]", i, sub) for i, sub in enumerate(axis)]
            fields = dict(kind.fields) if kind.tag == "fields" else None
            if fields is not None and sorted(fields) != sorted(step for step, _, _ in steps):
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what}: its fields do not match the in_axes "
                              "tree")
            if fields is None and kind.tag == "fields":
                raise Blocker(PRODUCER_UNKNOWN, argument, f"{what}: not a tree the tool can match")
            parts, whole = [], True
            for step, key, sub in steps:
                spec, same = self._argument_spec(argument, fields[step] if fields else kind,
                                                 sub, what)
                parts.append(f"{quoted(key)}: {spec}" if isinstance(axis, dict) else spec)
                whole = whole and same
            text = "{" + ", ".join(parts) + "}" if isinstance(axis, dict) else \
                "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
            return text, whole
        if kind.tag == "fields":  # one axis for a tuple / dict of values of mixed layouts
            steps = [step for step, _ in kind.fields]
            if steps == [f"[{i}]" for i in range(len(steps))]:
                axis = tuple(axis for _ in steps)
            elif all(step.startswith("['") for step in steps):
                axis = {ast.literal_eval(step[1:-1]): axis for step in steps}
            else:
                raise Blocker(PRODUCER_UNKNOWN, argument, f"{what}: not a tree the tool can match")
            return self._argument_spec(argument, kind, axis, what)
        if axis is None:
            if kind.changed:
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what} is not mapped (in_axes None) but "
                              "holds a per-device value")
            return "P()", True
        if kind.tag == "repl" and kind.axis == 0 and axis == 0:
            return "P()", True
        if kind.tag == "merged" and kind.axis == 0 and axis == 0:
            return f"P({AXIS_PLACEHOLDER})", False
        if type(axis) is int and axis >= 1 and not kind.changed:
            # A value the migration leaves in pmap's layout, mapped on axis k: shard_map
            # splits the same axis (the body's first statement squeezes it, see rewrite),
            # one slice per device only if that axis is the device count.
            if not self._sized_by_devcount(argument, axis):
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what} is mapped on axis {axis}, which is "
                              "not provably the device count (the mesh's size)")
            return f"P({'None, ' * axis}{AXIS_PLACEHOLDER})", False
        if site is not None and axis == 0 and kind.tag == "same" and (
                kind.rows or self._sized_by_devcount(self._only_producer(argument), 0)):
            return self._stacked_spec(argument, site, what), False
        why = self._unmergeable(argument)
        raise Blocker(PRODUCER_UNKNOWN, argument, f"{what} (`{_short(argument)}`) " + (
            f"has no global layout: {why}" if why
            else "has no known layout" + self._literal_extent(argument)))

    def _stacked_spec(self, argument, site: Site, what: str) -> str:
        """pmap's own layout, kept: the argument's leading axis is the device count (per-device
        keys, a step's per-device results), so shard_map hands each device a (1, ...) block
        of it and the body's first statement squeezes that axis, as pmap's slice had none."""
        if not (self.stacked_arguments and self.module.can_stack_results(site)
                and (self.module.starts_a_line(site.body) or isinstance(site.body, ast.Lambda))):
            why = self._unmergeable(argument) or "it keeps pmap's stacked layout"
            raise Blocker(PRODUCER_UNKNOWN, argument, f"{what} (`{_short(argument)}`): "
                          f"{why}, and its body cannot squeeze it")
        self.stacked[id(argument)] = (argument, f"{what} (`{_short(argument)}`) keeps its "
                                      f"device axis: {self._stacked_reason(argument)}")
        return f"P({AXIS_PLACEHOLDER}){STACKED_SPEC}"

    def kept_stacked_reason(self, producer) -> str | None:
        """Why the analysis kept `producer`'s value in pmap's layout, if it says (the
        multi-process analysis: a value that can differ between processes), or the consumer
        that asked for it."""
        reason = self.keep_reasons.get(id(producer))
        return None if reason is None else f"an unfollowed use reads it ({reason})"

    def _stacked_reason(self, argument, seen: frozenset = frozenset()) -> str:
        """Why a stacked argument has no global layout, naming its producer and line.
        `seen`: the names already followed (`x = np.asarray(x)` names itself)."""
        if isinstance(argument, ast.Name) and argument.id in seen:
            return "its leading axis is the device count"
        producer = self.producers.get(argument.id) if isinstance(argument, ast.Name) else argument
        if self.kept_stacked_reason(producer) is not None:
            return self.kept_stacked_reason(producer)
        if isinstance(producer, ast.Call) and self.qualified(producer.func) in AS_ARRAY \
                and len(producer.args) == 1:  # np.asarray(x): x's reason
            return self._stacked_reason(producer.args[0], seen | {getattr(argument, "id", "")})
        if isinstance(producer, ast.Call) and id(producer) in self.site_calls:
            return (f"per-device results of {self.site_calls[id(producer)].label} "
                    f"(line {producer.lineno})")
        if isinstance(producer, ast.Call) and self.qualified(producer.func) == SHARD_PRNG_KEY:
            return f"per-device RNG keys (`{_short(producer)}`, line {producer.lineno})"
        if isinstance(producer, ast.Call) and self.qualified(producer.func) in (
                "jax.random.split", "jax.random.key_split", "numpy.arange", "jax.numpy.arange"):
            return self._unmergeable(argument) or "its leading axis is the device count"
        if producer is None:
            return "its leading axis is the device count"
        return f"`{_short(producer)}` (line {producer.lineno}) is one row per device"

    def _only_producer(self, node):
        """The expression a name was bound to, if it is bound once in this function (so
        every path reaching here holds that value); any other node itself."""
        if not isinstance(node, ast.Name):
            return node
        stores = sum(isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store)
                     for n in ast.walk(self.function))
        return self.producers.get(node.id) if stores == 1 else None

    def _sized_by_devcount(self, node, axis: int, seen: frozenset = frozenset()) -> bool:
        """`node` is built here with the device count at `axis` of its shape: a numpy draw
        `size=(..., n, ...)`, a fill `np.zeros((..., n, ...))`, `broadcast_to(x, (..., n, ...))`
        or `x.reshape(..., n, ...)`, a jax.random draw of shape `(..., n, ...)`, or at axis 0
        `linspace(a, b, n)`, a shape of one int `np.ones(n)`, a `jax.vmap` call mapping such a
        value (`_vmapped_over_devcount`), or a name bound once to one of those,
        possibly followed by `.astype(...)` or a function that keeps its argument's shape
        (`_keeps_shape`)."""
        while isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "astype":
                node = node.func.value
            elif self._keeps_shape(node):
                node = node.args[0]
            else:
                break
        if isinstance(node, ast.Name) and node.id not in seen:
            return self._sized_by_devcount(self._only_producer(node), axis, seen | {node.id})
        if not isinstance(node, ast.Call):
            return False
        if axis == 0 and self._vmapped_over_devcount(node, seen):
            return True
        if self.qualified(node.func) in ("numpy.linspace", "jax.numpy.linspace"):
            num = node.args[2] if len(node.args) >= 3 else next(
                (k.value for k in node.keywords if k.arg == "num"), None)
            return axis == 0 and num is not None and self._is_devcount(num) and not any(
                k.arg in ("axis", "retstep") for k in node.keywords)
        size = self._shape_argument(node)
        if size is not None and axis == 0 and not isinstance(size, (ast.Tuple, ast.List)):
            return self._is_devcount(size)  # `np.ones(n)`: a shape of one int is `(n,)`
        return isinstance(size, ast.Tuple) and len(size.elts) > axis \
            and not any(isinstance(e, ast.Starred) for e in size.elts[:axis + 1]) \
            and self._is_devcount(size.elts[axis])

    def _shape_argument(self, call: ast.Call):
        """The shape `call` is given, as written: a draw's `size=` / `shape=`, a fill's first
        argument, `broadcast_to`'s second, `x.reshape`'s, a jax.random draw's second."""
        size = next((k.value for k in call.keywords if k.arg in ("size", "shape")), None)
        if size is None and isinstance(call.func, ast.Attribute) and call.func.attr == "reshape":
            size = call.args[0] if len(call.args) == 1 else ast.Tuple(elts=call.args)
        elif size is None and self.qualified(call.func) in CONSTANT_FILLS and call.args:
            size = call.args[0]
        elif size is None and self.qualified(call.func) in BROADCAST_TO and len(call.args) == 2:
            size = call.args[1]
        elif size is None and self.qualified(call.func) in _SHAPE_SECOND and len(call.args) >= 2:
            size = call.args[1]  # jax.random.normal(key, (n, ...))
        return size

    def _literal_extent(self, node) -> str:
        """Where `node` (or the value a name is bound to once) has a literal number of rows
        (`jnp.arange(1024)`, `np.zeros((4, 3))`): that number, its producer and line, for a
        finding; "" otherwise."""
        producer = self._only_producer(node) if isinstance(node, ast.Name) else node
        if not isinstance(producer, ast.Call):
            return ""
        if self.qualified(producer.func) in ("numpy.arange", "jax.numpy.arange") \
                and len(producer.args) == 1 and not producer.keywords:
            extent = producer.args[0]
        else:
            extent = self._shape_argument(producer)
            if isinstance(extent, (ast.Tuple, ast.List)):
                extent = extent.elts[0] if extent.elts else None
        if not (isinstance(extent, ast.Constant) and type(extent.value) is int):
            return ""
        text = ast.unparse(producer)
        text = text if len(text) <= 40 else text[:37] + "..."
        return (f": `{text}` (line {producer.lineno}) has {extent.value} rows, not provably "
                "one per device")

    def _keeps_shape(self, call: ast.Call) -> bool:
        """`np.asarray(x)`, `jnp.array(x, jnp.float32)`, `np.exp(x)`: a call whose result has
        its first argument's shape (one array: an elementwise function of several broadcasts,
        and `ndmin` adds axes)."""
        name = self.qualified(call.func)
        if name in ELEMENTWISE_FUNCTIONS:
            return len(call.args) == 1 and not call.keywords
        return name in AS_ARRAY and name != "jax.device_get" and 1 <= len(call.args) <= 2 \
            and all(k.arg in ("dtype", "copy") for k in call.keywords)

    def _vmapped_over_devcount(self, call: ast.Call, seen: frozenset) -> bool:
        """`jax.vmap(f)(x, ...)` (`stacked_rows.vmapped_arguments`) with one mapped argument,
        or one field of a dict / tuple / list literal it is, sized by the device count."""
        mapped = vmapped_arguments(call, self.qualified)
        return mapped is not None and any(
            self._sized_by_devcount(leaf, 0, seen)
            for argument in mapped for leaf in self._literal_leaves(argument, seen))

    def _literal_leaves(self, node, seen: frozenset) -> list:
        """The values of a dict / tuple / list literal, nested, or of the one a name is bound
        to once; any other node itself."""
        if isinstance(node, ast.Name) and node.id not in seen:
            producer = self._only_producer(node)
            if isinstance(producer, (ast.Dict, ast.Tuple, ast.List)):
                return self._literal_leaves(producer, seen | {node.id})
        if isinstance(node, ast.Dict) and None not in node.keys:
            return [leaf for value in node.values for leaf in self._literal_leaves(value, seen)]
        if isinstance(node, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in node.elts):
            return [leaf for e in node.elts for leaf in self._literal_leaves(e, seen)]
        return [node]

    def _unmergeable(self, argument) -> str | None:
        """Why a mapped argument built from the device count cannot be merged, if it is:
        `jax.random.split(key, n)` or `np.arange(n)` give one key or one scalar per device,
        and a per-device key or scalar has no batch axis to merge the device axis into."""
        producer = self.producers.get(argument.id) if isinstance(argument, ast.Name) else argument
        if not isinstance(producer, ast.Call) or not any(
                isinstance(n, ast.Name) and self.kinds.get(n.id, SAME).tag == "devcount"
                or isinstance(n, ast.Call) and not n.args and self.qualified(n.func) in DEVICE_COUNT
                for a in [*producer.args, *(k.value for k in producer.keywords)]
                for n in ast.walk(a)):
            return None
        text = ast.unparse(producer)
        text = text if len(text) <= 40 else text[:37] + "..."
        if self.qualified(producer.func) in ("jax.random.split", "jax.random.key_split"):
            return f"per-device RNG keys (`{text}`, line {producer.lineno})"
        if self.qualified(producer.func) in ("numpy.arange", "jax.numpy.arange"):
            return f"per-device scalars (`{text}`, line {producer.lineno})"
        return f"`{text}` (line {producer.lineno}) is no known batch"


def _all_replicated(kind: Kind) -> bool:
    """A tuple or list of replicated stacks (`replicate((w, b))`, a step's tuple result)."""
    return kind.tag == "fields" and all(
        field.tag == "repl" and field.axis == 0 or _all_replicated(field) for _, field in kind.fields)


def _short(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


# jax.random draws whose second positional argument is the shape.
_SHAPE_SECOND = frozenset(f"jax.random.{name}" for name in (
    "normal", "uniform", "randint", "bits", "gumbel", "laplace", "logistic", "cauchy",
    "exponential", "rademacher"))
