"""The model of a global site: `Site` (one pmap the global style may take, with its options
read), `Blocker` (why a site or caller keeps the faithful style, a PM6xx code and its node),
and `dotted`, how the analyses name what an expression refers to. Which sites qualify is
site_discovery.py; how a site's options are read is site_options.py.
"""

from __future__ import annotations

import ast
import dataclasses

from transforms.reading.names import dotted

PMAP = "jax.pmap"
PARTIAL = "functools.partial"
JIT = "jax.jit"


@dataclasses.dataclass(frozen=True)
class Blocker(Exception):
    code: str
    node: ast.AST
    message: str
    names: list = dataclasses.field(default_factory=list, compare=False)  # sites it keeps faithful
    # Raised by one site's call in a caller: that site alone may fall back (fixpoint.py)
    site: str | None = dataclasses.field(default=None, compare=False)
    # Producers whose values reached the construct it names: kept stacked, the caller may pass
    origins: frozenset = dataclasses.field(default=frozenset(), compare=False)
    # The pmap this blocker keeps from the global style, where `node` is another node (a
    # partial's argument, a decorator above it): claimed with it, so the pmap gets no second,
    # vaguer finding of its own (site_discovery.py)
    covers: ast.AST | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass
class Site:
    name: str  # the module-level name callers use
    node: ast.AST  # the decorator expression or the `jax.pmap(...)` call
    statement: ast.stmt  # the def or the assignment
    body: ast.FunctionDef | ast.Lambda  # the mapped function
    params: list[str]
    axis_name: str | None  # None: no axis_name, so the body names no axis (any mesh axis fits)
    in_axes: tuple  # one per parameter: 0, None, or a dict / tuple tree of them
    donate: str | None  # source text of donate_argnums, or None
    decorated: bool
    out_none: bool = False  # out_axes=None: the original returns the unstacked value
    owner: str | None = None  # the module function a local or inline site is built in
    inline: bool = False  # `jax.pmap(f, ...)(args)`: called where it is built
    function_node: ast.AST | None = None  # assigned / inline: the mapped function expression
    factory: bool = False  # `def name(...): ...; return jax.pmap(...)`, only used as name(...)(x)
    # a factory that returns a tuple: the index of its pmap there (the position of the name
    # each call unpacks it into, `step, lr = make_step(...)`) and the tuple's length
    returned: tuple[int, int] | None = None
    static: tuple[int, ...] = ()  # static_broadcasted_argnums, pmap's numbering
    # devices= / axis_size=: exact only when they are all devices / the device count, which
    # the caller's analysis decides (the expression is evaluated where the site is built)
    placement: dict[str, ast.AST] = dataclasses.field(default_factory=dict)
    # out_axes other than a plain 0 / None: a tuple (0, None, 1, ...) or a dict {"k": 0, ...}
    # with one entry per result, or one int >= 1 for the whole result
    out_tree: tuple | dict | int | None = None
    outer_jit: ast.AST | None = None  # a bare `@jax.jit` right above the pmap decorator
    replaced: ast.AST | None = None  # `jax.jit(jax.pmap(...))`: the jit call the rewrite replaces
    # Held by a class (global_view/classes.py): `self.<attribute> = jax.pmap(...)` in the
    # `__init__` of the module-level class `holder`, or of a factory's returned pmap.
    holder: str | None = None
    attribute: str | None = None
    # Names the body reads that are string constants in its scope (a factory's `axis_name`
    # parameter whose default every call uses), and the function whose nested defs it calls.
    constants: dict[str, str] = dataclasses.field(default_factory=dict)
    enclosing: ast.FunctionDef | None = None
    bound_self: str | None = None  # a bound method `self.m`: the name of its `self` parameter
    passed: int | None = None  # callers pass only the first `passed` parameters (defaults fill)
    # `jax.pmap(f)(x, ...)` of a function whose body is not read (`jnp.dot`, `env.reset`): its
    # body is a stand-in `lambda _x0, ...: f(_x0, ...)` at f's place (opaque_lambda)
    opaque: bool = False
    # `step = jax.pmap(step, ...)`: the def it maps, which every later read of the name means
    # the site; at module level renamed `_step` under the jitted wrapper `def step(...)`, as a
    # decorated def's body is
    rebinds: ast.FunctionDef | None = None
    # `functools.partial(f, k=...)` parameters after the bound ones that every call passes by
    # keyword (flax's `p_train_step(state, batch, dropout_rng=rngs)`): the last entries of
    # `params`, in f's order, each mapped on axis 0 as pmap maps keyword arguments
    keyword_params: tuple[str, ...] = ()
    # Top-level reads of `name` that run before the statement binding the site (a notebook
    # cell above it): they mean the name's earlier binding, not the site (node ids;
    # callers.mark_reads_before_binding)
    read_before: frozenset[int] = frozenset()
    # `learn = get_learner_fn(...)` then `learn = jax.pmap(learn, ...)`: the factory call whose
    # returned nested def (`body`, a closure over the call's arguments) the site maps; the
    # names the closure reads from the caller are those of this call
    closure_call: ast.Call | None = None

    @property
    def called_params(self) -> list[str]:
        """The parameters its callers pass (the hoisted step's signature)."""
        return self.params if self.passed is None else self.params[:self.passed]

    @property
    def label(self) -> str:
        """How findings name the site."""
        if self.holder:
            return f"`self.{self.attribute}` of `{self.holder}` (line {self.node.lineno})"
        if self.factory:
            return f"the pmap `{self.name}` returns (line {self.node.lineno})"
        return f"the pmap at line {self.node.lineno}" if self.inline else f"`{self.name}`"

    @property
    def built(self) -> ast.AST:
        """The expression that builds the pmapped callable (the span the rewrite replaces)."""
        return self.replaced or self.node

    @property
    def key(self) -> str:
        """Unique in the module: a local site is named after the function it is built in."""
        if self.holder:
            return f"{self.holder}.{self.attribute}"
        return self.name if self.owner is None or self.inline else f"{self.owner}.{self.name}"


# Decorators that return the function they are given or one that behaves as it does (a cache
# of its results, its metadata copied): a function under them is read as if undecorated.
BEHAVIOUR_KEEPING = frozenset({"functools.lru_cache", "functools.cache", "functools.wraps"})


def keeps_behaviour(function: ast.FunctionDef, imported: dict[str, str]) -> bool:
    """Every decorator of `function` keeps its behaviour (`@functools.lru_cache(None)`,
    `@functools.cache`, `@functools.wraps(f)`): its code runs as written when it runs at all,
    so the pmaps it builds and returns are read as an undecorated function's."""
    return all(dotted(d.func if isinstance(d, ast.Call) else d, imported) in BEHAVIOUR_KEEPING
               for d in function.decorator_list)


def pmap_call_options(call: ast.Call, imported: dict[str, str]) -> tuple[ast.AST, list, list] | None:
    """(function expression or None, positional options, keywords) of `jax.pmap(f, ...)` or
    `functools.partial(jax.pmap, ...)`; None for any other call."""
    name = dotted(call.func, imported)
    if name == PMAP:
        return (call.args[0] if call.args else None), call.args[1:], call.keywords
    if name == PARTIAL and call.args and dotted(call.args[0], imported) == PMAP:
        return None, call.args[1:], call.keywords
    return None


def pmap_call(value, imported) -> ast.Call | None:
    """The `jax.pmap(...)` call of `jax.pmap(...)` or of a bare `jax.jit(jax.pmap(...))`."""
    if not isinstance(value, ast.Call):
        return None
    if dotted(value.func, imported) == PMAP:
        return value
    if dotted(value.func, imported) == JIT and len(value.args) == 1 and not value.keywords \
            and isinstance(value.args[0], ast.Call) and dotted(value.args[0].func, imported) == PMAP:
        return value.args[0]
    return None


