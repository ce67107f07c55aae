"""What a local value of a caller is (`Kind`), the API names the analysis recognises, and
the small pure helpers the caller analysis (dataflow.py and its mixins) shares."""

from __future__ import annotations

import ast
import contextlib
import contextvars
import dataclasses

from transforms.codes.global_view import CONSUMER_UNKNOWN
from transforms.global_view.layout import MERGED, REPLICATED, OutputLayout
from transforms.global_view.sites import Blocker

AXIS_PLACEHOLDER = "\x00axis\x00"  # the caller's mesh axis, known once its sites are
MESH_PLACEHOLDER = "\x00mesh\x00"  # the name of that axis's mesh (`mesh`, or `mesh_j`: axes.py)
MESH_FUNCTION = "_mesh"  # the module's cached 1-D mesh per axis name (post_passes.py writes it)
# The module's function giving back pmap's n equal rows of a replicated value, for an f-string
# field that formats one (expressions.py; post_passes.py writes it where a field calls it).
DEVICE_ROWS_FUNCTION = "_device_rows"


def placed(jax: str, text: str, spec: str) -> str:
    """`text` placed on the caller's mesh with `spec`. The mesh is named, not taken from a
    context: under `jax.set_mesh` every eager jax.numpy value the user's code makes would be
    placed on all devices (jnp.float32(0.5): 35 -> 350 us on 8 CPU devices)."""
    return f"{jax}.device_put({text}, NamedSharding({MESH_PLACEHOLDER}, {spec}))"
TREE_MAP = {"jax.tree_util.tree_map", "jax.tree.map", "jax.tree_map"}
STACK = {"jax.numpy.stack", "numpy.stack"}
# `np.array([x] * n)` is `np.stack([x] * n)`: n equal rows (an array made from a list of arrays
# of one shape stacks them)
ARRAY_OF_ROWS = {"jax.numpy.array", "numpy.array", "jax.numpy.asarray", "numpy.asarray"}
BROADCAST_TO = {"jax.numpy.broadcast_to", "numpy.broadcast_to"}
# `np.repeat(x[None], n, axis=0)`: n copies of x along a new leading axis
REPEAT = {"jax.numpy.repeat", "numpy.repeat"}
AS_ARRAY = {"numpy.asarray", "numpy.array", "jax.numpy.asarray", "jax.numpy.array",
            "jax.device_get"}
# jax.numpy's conversions: the array they make is on one device (a batch the steps then split
# over the mesh at every call, unless it is placed with its sharding once: idioms.py)
DEVICE_ARRAYS = {"jax.numpy.asarray", "jax.numpy.array"}
REDUCTIONS = {f"{m}.{f}" for m in ("numpy", "jax.numpy")
              for f in ("argmax", "argmin", "sum", "mean", "max", "min", "any", "all")}
# Functions that give back the very tree they are given (waiting on its arrays first): the
# result has the argument's layout, whatever it is.
IDENTITIES = {"jax.block_until_ready"}
# Array methods and numpy / jax.numpy functions of one array that give an array of its shape
# (elementwise, or a copy): applied to pmap's stacked rows, they keep the leading device axis.
SHAPE_KEEPING_METHODS = frozenset({"block_until_ready", "astype", "copy", "clip", "round",
                                   "conj", "conjugate", "real", "imag"})
ELEMENTWISE_FUNCTIONS = frozenset(
    f"{module}.{function}" for module in ("numpy", "jax.numpy")
    for function in ("sin", "cos", "tan", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan",
                     "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "square", "abs",
                     "absolute", "negative", "sign", "floor", "ceil", "round", "clip",
                     "reciprocal", "isnan", "isfinite", "logical_not", "copy"))
# jax.vmap: with in_axes and out_axes 0, its results lead with its arguments' mapped axis
VMAP = {"jax.vmap"}
DEVICE_COUNT = {"jax.local_device_count", "jax.device_count"}
DEVICES = {"jax.local_devices", "jax.devices"}
REPLICATE = {"jax.device_put_replicated", "flax.jax_utils.replicate"}
UNREPLICATE = {"flax.jax_utils.unreplicate"}
SHARD = {"flax.training.common_utils.shard"}
# flax's prefetch_to_device: since flax made it jax 0.10's (device_put_sharded is gone), each
# leaf goes to `NamedSharding(Mesh(devices, (name,)), P(name))`, split on its leading axis
PREFETCH_TO_DEVICE = "flax.jax_utils.prefetch_to_device"
# flax's `stack_forest(device_get(tree_map(lambda x: x[0], xs)))`: device 0's copy of each
# replicated metric of a list, stacked on the host
GET_METRICS = "flax.training.common_utils.get_metrics"
# flax's `jax.random.split(key, num=jax.local_device_count())`: one key per device
SHARD_PRNG_KEY = "flax.training.common_utils.shard_prng_key"
# numpy random draws fill their `size` in C order, so (n, b, ...) and (n * b, ...) draw the
# same numbers: the merged batch is the same data.
RNG_DRAWS = {"normal", "uniform", "standard_normal", "random", "integers", "randint", "rand"}
SHAPED_LIKE = {f"{m}.{f}" for m in ("numpy", "jax.numpy") for f in ("zeros_like", "ones_like")}
TO_SCALAR = {"builtins.float", "builtins.int", "builtins.bool"}
# Constant stacks: every row is the same, so they are replicated by construction.
# Reductions over every element of an array (consumers.py `_whole_reduction`), as methods and
# as numpy / jax.numpy functions; those of them one row repeated does not change.
WHOLE_REDUCTIONS = {"mean", "max", "min", "sum", "prod", "all", "any"}
WHOLE_REDUCTION_FUNCTIONS = {
    f"{module}.{function}": function.removeprefix("a") if function in ("amax", "amin") else function
    for module in ("numpy", "jax.numpy")
    for function in (*WHOLE_REDUCTIONS, "amax", "amin")
}
SAME_ON_EQUAL_ROWS = {"mean", "max", "min", "all", "any"}
CONSTANT_FILLS = {f"{m}.{f}" for m in ("numpy", "jax.numpy") for f in ("zeros", "ones", "full")}


@dataclasses.dataclass(frozen=True)
class Kind:
    tag: str  # same | repl | merged | list | empty_list | devcount | devices | fields | iterator
    #         | record (a dataclass / NamedTuple / flax struct whose fields differ in layout)
    #         | lowered | compiled (a site's `.lower(...)` / `.lower(...).compile()`: lowering.py)
    axis: int = 0
    rank: int | None = None  # merged: the original's rank, where known
    least: int = 0  # merged: a lower bound of the original's rank, where only that is known
    placed: bool = False  # merged: a jax.Array sharded P(axis) over the mesh (not host data)
    scalars: bool = False  # same: `arange(n)`, one number per device (pmap's layout, kept)
    tree: bool = False  # repl: may be a tuple or list of stacks (a step's result of unknown shape)
    element: Kind | None = None  # list, iterator (a followed generator): its elements' kind
    #                               record: the kind of every field `fields` does not name
    fields: tuple = ()  # fields: ((key path step, Kind), ...) of a dict or tuple literal
    #                     record: ((field name, Kind), ...) of the fields `.replace` set
    holder: str = ""  # instance: the module class (global_view/classes.py) it is an instance of
    #                   same: the module class a constructor call made it an instance of
    #                   record: the call that rebuilt it, with the line (`.replace`, line 12)
    #                   lowered / compiled: the key of the site it was lowered from
    length: int | None = None  # list: its number of elements, where known (`*xs` into a step)
    # same: pmap's stacked layout, kept, with the device count as its leading axis (per-device
    # keys, a step's per-device results): a site takes it as P(axis), squeezed in the body
    rows: bool = False
    # same: a shape, a tuple or list of ints whose first entry is the device count
    # (`batch_dims=[jax.local_device_count(), 8]`): an array reshaped to it has pmap's layout
    leads: bool = False
    # record: (field name, line) of the `.replace` keywords that set its fields (findings)
    lines: tuple = dataclasses.field(default=(), compare=False)
    # same with rows: why a step's result came back per-device (the body's result that is not
    # provably the same on every device, and what makes it so), for findings
    why: str = dataclasses.field(default="", compare=False)
    # repl / merged / fields: the producer calls whose edits made it (ids), so that a consumer
    # the analysis cannot follow can send those producers back to pmap's stacked layout
    origin: frozenset = dataclasses.field(default=frozenset(), compare=False)

    @property
    def changed(self) -> bool:
        return self.tag in ("repl", "merged", "list", "fields", "iterator", "instance",
                            "lowered", "compiled", "record")


def least_rank(kind: Kind) -> int:
    return kind.rank if kind.rank is not None else kind.least


# The public attributes of a numpy / jax array (numpy 2's ndarray and generic, jax.Array and
# its concrete ArrayImpl). Any other attribute of a replicated value is a field of the tree it
# is (`state.params` of flax's replicated TrainState): replicated too.
ARRAY_ATTRIBUTES = frozenset({
    "T", "addressable_data", "addressable_shards", "all", "any", "argmax", "argmin",
    "argpartition", "argsort", "astype", "at", "aval", "base", "block_until_ready", "byteswap",
    "choose", "clip", "committed", "compress", "conj", "conjugate", "copy", "copy_to_host_async",
    "ctypes", "cumprod", "cumsum", "data", "delete", "device", "device_buffer", "device_buffers",
    "devices", "diagonal", "dot", "dtype", "dump", "dumps", "fill", "flags", "flat", "flatten",
    "format", "getfield", "global_shards", "imag", "is_deleted", "is_fully_addressable",
    "is_fully_replicated", "item", "itemsize", "mT", "max", "mean", "min", "nbytes", "ndim",
    "nonzero", "on_device_size_in_bytes", "partition", "prod", "ptp", "put", "ravel", "real",
    "repeat", "reshape", "resize", "round", "searchsorted", "setfield", "setflags", "shape",
    "sharding", "size", "sort", "squeeze", "std", "strides", "sum", "swapaxes", "take",
    "to_device", "tobytes", "tofile", "tolist", "trace", "transpose", "traceback",
    "unsafe_buffer_pointer", "var", "view", "weak_type",
})


SAME = Kind("same")
NUMBER = Kind("same", rank=0)  # a plain scalar: a number literal, `jax.process_index()`
# Calls that give a Python int, the same kind of value in the original and the migration.
PROCESS_NUMBERS = frozenset({"jax.process_index", "jax.process_count", "jax.host_id",
                             "jax.host_count"})
REPL = Kind("repl")
ROWS = Kind("same", rows=True)
# Appended to an in_specs text: the argument is stacked (P(axis) over its leading device axis)
# and the body squeezes that axis on entry, so it sees one device's row as under pmap.
STACKED_SPEC = "\x00stacked"


def list_of(element: Kind, length: int | None = None) -> Kind:
    return SAME if element.tag in ("same", "devcount") else Kind("list", element=element,
                                                                 length=length)


DEFAULT_AXIS = "devices"  # the mesh axis when no site called names one
REPLICATED_OUT, STACKED_OUT, MERGED_OUT = "replicated", "stacked", "merged"
SCALARS_OUT = "scalars"  # per-device scalars in and out, as (1,) blocks of pmap's (n,) layout
NONE_OUT = "unstacked"  # one result of out_axes=(..., None, ...): P(), as the original returns it


def stacked_at(axis: int) -> str:
    """The result mode of a per-device result whose device axis pmap put at `axis`."""
    return STACKED_OUT if axis == 0 else f"{STACKED_OUT}@{axis}"


def stacked_axis(mode: str) -> int | None:
    """The device axis of a stacked result mode; None for P() results."""
    if mode == STACKED_OUT:
        return 0
    return int(mode.split("@")[1]) if mode.startswith(f"{STACKED_OUT}@") else None


def layouts_of(kind: Kind, path: str, node) -> list[OutputLayout]:
    if kind.tag == "repl":
        return [OutputLayout(path, REPLICATED, kind.axis)]
    if kind.tag == "merged":
        return [OutputLayout(path, MERGED, kind.axis)]
    if kind.tag == "fields":
        return [layout for step, field in kind.fields
                for layout in layouts_of(field, path + step, node)]
    if kind.tag in ("list", "iterator", "lowered", "compiled", "record"):
        raise Blocker(CONSUMER_UNKNOWN, node, f"returns {describe(kind)}")
    return []


def replicated_operand(call: ast.Call, name: str, is_devcount, rank_of) -> ast.AST | None:
    """x of `jnp.stack([x] * n)`, `jnp.stack([x for _ in range(n)])`, `np.broadcast_to(x,
    (n,) + x.shape)`, `jnp.repeat(x[None], n, axis=0)` or, for a 0-d x, `np.broadcast_to(x,
    (n,))` (n: device count): n equal rows, each x."""
    if name in STACK | ARRAY_OF_ROWS and len(call.args) == 1 and not call.keywords:
        items = call.args[0]
        if isinstance(items, ast.BinOp) and isinstance(items.op, ast.Mult):
            for listed, count in ((items.left, items.right), (items.right, items.left)):
                if isinstance(listed, ast.List) and len(listed.elts) == 1 and is_devcount(count):
                    return listed.elts[0]
        copies = _copies(items, is_devcount)
        if copies is not None:
            return copies
    if name in REPEAT and len(call.args) >= 2 and is_devcount(call.args[1]):
        axis = call.args[2:] + [k.value for k in call.keywords if k.arg == "axis"]
        if len(axis) == 1 and len(call.args) + len(call.keywords) == 3 \
                and isinstance(axis[0], ast.Constant) and type(axis[0].value) is int \
                and axis[0].value == 0:
            return _with_new_axis_zero(call.args[0])
    if name in BROADCAST_TO and len(call.args) == 2 and not call.keywords:
        value, shape = call.args
        leading = None
        if isinstance(shape, ast.BinOp) and isinstance(shape.op, ast.Add) \
                and isinstance(shape.left, ast.Tuple) and len(shape.left.elts) == 1:
            leading, rest = shape.left.elts[0], shape.right
        elif isinstance(shape, ast.Tuple) and len(shape.elts) == 2 \
                and isinstance(shape.elts[1], ast.Starred):
            leading, rest = shape.elts[0], shape.elts[1].value
        elif isinstance(shape, ast.Tuple) and len(shape.elts) == 1 and is_devcount(shape.elts[0]) \
                and rank_of(value) == 0:
            return value
        if leading is not None and is_devcount(leading) and isinstance(rest, ast.Attribute) \
                and rest.attr == "shape" and _pure(value) and ast.dump(rest.value) == ast.dump(value):
            return value
    return None


def _copies(items, is_devcount) -> ast.AST | None:
    """x of `[x for _ in range(n)]`: n copies of one value (x names nothing the loop binds,
    and evaluating it n times gives the same value: `_pure`)."""
    if not (isinstance(items, ast.ListComp) and len(items.generators) == 1):
        return None
    loop = items.generators[0]
    bound = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    counted = loop.iter
    if loop.ifs or loop.is_async or not isinstance(counted, ast.Call) \
            or not (isinstance(counted.func, ast.Name) and counted.func.id == "range") \
            or len(counted.args) != 1 or counted.keywords or not is_devcount(counted.args[0]) \
            or not _pure(items.elt) or any(isinstance(n, ast.Name) and n.id in bound
                                           for n in ast.walk(items.elt)):
        return None
    return items.elt


def _with_new_axis_zero(node) -> ast.AST | None:
    """x of `x[None]` or `x[None, ...]`: x with a new leading axis of 1."""
    if not isinstance(node, ast.Subscript):
        return None
    index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if not index or not (isinstance(index[0], ast.Constant) and index[0].value is None) or \
            not all(isinstance(e, ast.Constant) and e.value is Ellipsis for e in index[1:2]) \
            or len(index) > 2:
        return None
    return node.value


def _pure(node) -> bool:
    """A name, or attributes / constant subscripts of one: evaluating it twice is harmless."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            return False
        node = node.value
    return isinstance(node, ast.Name)


def is_row_zero_lambda(function: ast.Lambda) -> bool:
    params = [a.arg for a in function.args.args]
    body = function.body
    return (len(params) == 1 and isinstance(body, ast.Subscript)
            and isinstance(body.value, ast.Name) and body.value.id == params[0]
            and isinstance(body.slice, ast.Constant) and body.slice.value == 0
            and type(body.slice.value) is int)


def is_minus_one(node) -> bool:
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and node.operand.value == 1
            and type(node.operand.value) is int) or (
        isinstance(node, ast.Constant) and node.value == -1 and type(node.value) is int)


# The quote the literals the global style writes use: the module's own (module_quote), set
# for the time one module is migrated (rewrite.migrate_global).
_QUOTE: contextvars.ContextVar[str] = contextvars.ContextVar("quote", default='"')


@contextlib.contextmanager
def literals_quoted_as(quote: str):
    token = _QUOTE.set(quote)
    try:
        yield
    finally:
        _QUOTE.reset(token)


def module_quote(tree: ast.Module, source: bytes) -> str:
    """The quote most of the module's one-line string literals use (single in much Google
    code, double in black's); double quotes when it has none, or as many of each."""
    lines = source.splitlines()
    counts = {"'": 0, '"': 0}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.lineno == node.end_lineno and node.lineno <= len(lines):
            start = lines[node.lineno - 1][node.col_offset:node.col_offset + 5].lstrip(b"rRbBuUfF")
            if start[:3] not in (b"'''", b'"""') and start[:1].decode("ascii", "replace") in counts:
                counts[start[:1].decode()] += 1
    return "'" if counts["'"] > counts['"'] else '"'


def quoted(text: str) -> str:
    """A string literal in the module's quotes (double quotes by default, as most Python code
    writes them)."""
    quote = _QUOTE.get()
    return f"{quote}{text}{quote}" if quote not in text and "\\" not in text else repr(text)


def tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def operand_text(text: str) -> str:
    """`text` safe as the operand of `*` or `.`: parenthesised unless it is one atom."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    atoms = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value < 0:
        return f"({text})"
    return text if isinstance(node, atoms) else f"({text})"


def describe(kind: Kind) -> str:
    return {
        "same": "a plain value",
        "repl": "a replicated stack (pmap's device axis)",
        "merged": "a per-device batch",
        "list": "a list of per-device values",
        "iterator": "a generator of per-device values",
        "empty_list": "a list",
        "devcount": "the device count",
        "devices": "the device list",
        "fields": "a tree of per-device values of mixed layout",
        "record": "a record whose fields differ in layout",
        "instance": f"a `{kind.holder}` instance (a class holding pmaps)",
        "lowered": "a pmap site lowered with `.lower(...)`",
        "compiled": "a pmap site compiled with `.lower(...).compile()`",
    }[kind.tag]


def with_origin(kind: Kind, origin: frozenset) -> Kind:
    """`kind` (and its fields) made by the producers `origin`."""
    if kind.tag in ("fields", "record"):
        return dataclasses.replace(kind, origin=origin, fields=tuple(
            (step, with_origin(field, origin)) for step, field in kind.fields),
            element=kind.element and with_origin(kind.element, origin))
    return dataclasses.replace(kind, origin=origin) if kind.changed else kind


def origins(*kinds: Kind) -> frozenset:
    """The producers behind changed kinds (and their fields)."""
    found = set()
    for kind in kinds:
        found |= kind.origin
        for _, field in kind.fields:
            found |= origins(field)
        if kind.tag == "record":
            found |= origins(kind.element)
    return frozenset(found)
