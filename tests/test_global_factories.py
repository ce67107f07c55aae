"""Factories of pmaps in the global style: what makes a factory's result its site's calls, and
what does not (the fixture pairs inline_factory and factory_stored_and_called_later show the
rewrites and run them)."""

from __future__ import annotations

import pytest

from conftest import ROOT
from transforms.contract_names import pmap_contract_code
from transforms.pipeline import migrate_source
from transforms.tree_uses import TreeContext
from site_findings_view import with_named_blockers

_FACTORY = b'''import jax
import jax.numpy as jnp
import numpy as np


def make_update_fn(lr, axis_name="batch"):
    def update(w, x):
        return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), axis_name)

    return jax.pmap(update, axis_name=axis_name)


def run():
    n = jax.local_device_count()
    update_fn = make_update_fn(0.1)
    w = jnp.stack([jnp.ones((3,))] * n)
    x = np.ones((n, 4, 3), np.float32)
    for _ in range(3):
        w = update_fn(w, x)
    return np.asarray(w[0])
'''


def _codes(source: bytes) -> list[str]:
    return sorted(f.code for f in with_named_blockers(
        migrate_source(source, style="global").findings))


def test_a_stored_factory_result_only_called_is_the_sites_caller():
    assert _codes(_FACTORY) == ["PM600"]


def test_a_stored_result_used_otherwise_keeps_the_contract():
    """Passed on (here to a list), its calls are not all seen."""
    source = _FACTORY.replace(b"    return np.asarray(w[0])",
                              b"    steps = [update_fn]\n    return np.asarray(w[0])")
    assert "PM600" not in _codes(source)


def test_a_stored_result_bound_twice_keeps_the_contract():
    source = _FACTORY.replace(b"    return np.asarray(w[0])",
                              b"    update_fn = make_update_fn(0.2)\n    return np.asarray(w[0])")
    assert "PM600" not in _codes(source)


def test_an_axis_name_a_call_passes_is_not_a_constant():
    source = _FACTORY.replace(b"make_update_fn(0.1)", b'make_update_fn(0.1, "other")')
    assert "PM600" not in _codes(source) and "PM602" in _codes(source)


def test_an_axis_name_left_to_its_default_reads_as_the_default():
    text = migrate_source(_FACTORY, style="global").source.decode()
    assert 'mesh=_mesh("batch")' in text
    assert "jax.lax.pmean(jnp.mean(x, axis=0), axis_name)" in text  # the body still reads it


def _findings(source: bytes) -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.message)
            for f in with_named_blockers(migrate_source(source, style="global").findings)]


def _contract_reason(source: bytes, line: int) -> str:
    """The blocker the PM612 at `line` names at its end: `PM602, line 17)`."""
    (message,) = [m for code, at, m in _findings(source) if code == "PM612" and at == line]
    return message.rsplit(" (", 1)[1]


_PARTIAL_OF_A_CALL = b'''import functools

import jax
import numpy as np


def step(x, *, scale):
    return jax.lax.psum(x * scale, "i")


def make_scale(k):
    return 2.0 * k


def train(x):
    p_step = jax.pmap(
        functools.partial(step, scale=(k := make_scale(3.0))),
        axis_name="i")
    return p_step(x), k


def run():
    n = jax.local_device_count()
    return np.asarray(train(np.ones((n, 3), np.float32))[0])
'''


def test_a_local_site_names_its_own_blocker_and_line_not_a_vaguer_one():
    """The partial's argument (line 17, a walrus: the rewrite may not move where it binds) is
    why the pmap of line 16 keeps the contract: the PM612 says so, and the pmap gets no second
    `does not follow` finding."""
    findings = _findings(_PARTIAL_OF_A_CALL)
    assert "PM601" not in [code for code, _, _ in findings]
    assert ("PM602", 17) in [(code, line) for code, line, _ in findings]
    assert _contract_reason(_PARTIAL_OF_A_CALL, 16).startswith("PM602, line 17)")


_DECORATED = b'''import functools

import jax
import jax.numpy as jnp
import numpy as np


def halved(f):
    def wrapper(x):
        return f(x) / 2
    return wrapper


def advance(x):
    @halved
    @functools.partial(jax.pmap, axis_name="x")
    def step(tile):
        return tile + jax.lax.psum(tile, "x")
    return step(x)


def run():
    n = jax.local_device_count()
    return np.asarray(advance(jnp.ones((n, 2))))
'''


def test_a_decorator_above_a_nested_pmap_is_the_contracts_named_reason():
    findings = _findings(_DECORATED)
    assert "PM601" not in [code for code, _, _ in findings]
    assert _contract_reason(_DECORATED, 16).startswith("PM602, line 15)")


def test_a_rebound_call_result_is_named_with_its_line():
    """A call's result the global style cannot read as a def (here the factory returns its
    def under a decorator): the blocker names the value and its line."""
    source = b'''import jax
import numpy as np


def make_learner(scale):
    @jax.checkpoint
    def learn(x):
        return jax.lax.pmean(x * scale, "d")
    return learn


def setup(scale):
    learn = make_learner(scale)
    learn = jax.pmap(learn, axis_name="d")
    return learn(np.ones((jax.local_device_count(), 2), np.float32))
'''
    (message,) = [m for code, line, m in _findings(source) if code == "PM601" and line == 14]
    assert "`learn` is rebound to the pmap of its earlier value, `make_learner(...)`" \
        in message and "(line 13)" in message


def test_a_pmap_in_a_decorated_function_names_that_decorator():
    source = b'''import functools

import jax

from project import timed


@timed(None)
def get_eval_fn(scale):
    @functools.partial(jax.pmap, axis_name="batch")
    def _eval_fn(x):
        return jax.lax.psum(x * scale, "batch")
    return _eval_fn
'''
    (message,) = [m for code, line, m in _findings(source) if code == "PM601"]
    assert "decorates `_eval_fn` in `get_eval_fn`, itself decorated " \
        "(`@timed(None)`, line 8)" in message


_TUPLE = (ROOT / "tests" / "fixtures_global" / "factory_returned_in_a_tuple" / "before.py"
          ).read_bytes()
_BY_NAME = (ROOT / "tests" / "fixtures_global" / "factory_returned_by_name" / "before.py"
            ).read_bytes()


def _global_text(source: bytes) -> str:
    return migrate_source(source, style="global").source.decode()


@pytest.mark.parametrize("source", [_TUPLE, _BY_NAME], ids=["tuple", "by_name"])
def test_a_factory_returning_its_pmap_by_name_or_in_a_tuple_is_a_site(source):
    assert _codes(source) == ["PM600"]
    assert pmap_contract_code(_global_text(source)) == []


@pytest.mark.parametrize("old, new", [
    # a stacked value returned beside the pmap and passed to it: unknown to the caller, so it
    # is no proof of a layout (the factory's values are not followed)
    (b"    return step, lr * 10, \"sgd\"",
     b"    return step, jnp.stack([jnp.ones((3,))] * jax.local_device_count()), \"sgd\""),
    # the pmap's name read again in the factory
    (b"    return step, lr * 10, \"sgd\"", b"    step.lower\n    return step, lr * 10, \"sgd\""),
    # the position that holds the pmap is not the one unpacked into a name only called
    (b"    step, shown_lr, tag = make_trainer(0.1)", b"    shown_lr, step, tag = make_trainer(0.1)"),
    # the tuple kept whole, or unpacked elsewhere into a name used otherwise
    (b"    step, shown_lr, tag = make_trainer(0.1)",
     b"    made = make_trainer(0.1)\n    step, shown_lr, tag = made"),
    (b"    return {\"w\"", b"    other, _, _ = make_trainer(0.2)\n    steps = [other]\n"
                           b"    return {\"w\""),
])
def test_a_tuple_factory_not_provably_used_so_keeps_the_contract(old, new):
    assert old in _TUPLE
    source = _TUPLE.replace(old, new)
    if old.startswith(b"    return step") and b"jnp.stack" in new:
        source = source.replace(b"    for _ in range(3):", b"    w = shown_lr\n    for _ in range(3):")
    assert "PM600" not in _codes(source)


def test_a_factory_returning_its_pmap_alone_is_not_unpacked():
    source = _BY_NAME.replace(b"    return update\n", b"    return (update,)\n")
    assert "PM600" not in _codes(source)  # called as `update = make_update(...)`: a tuple


_UNCALLED = _FACTORY.split(b"\n\ndef run():")[0] + b"\n"


def test_a_factory_another_module_calls_names_that_use():
    """vit_jax's `train.make_update_fn`, called from the notebook beside it: the blocker is the
    use there, not a shape of use in this module."""
    tree = TreeContext(used_elsewhere={"make_update_fn": "colab.ipynb cell 15"})
    findings = migrate_source(_UNCALLED, style="global", tree=tree).findings
    assert [f.message for f in findings] == [
        "kept pmap's calling convention: `make_update_fn` is used by another module "
        "(colab.ipynb cell 15) (PM603)"]
    assert "PM601" not in [f.code for f in findings]


def test_a_factory_nothing_calls_says_so():
    """No caller in its module and no use in another module of the run: the finding says the
    paths given hold no caller, so the user knows to pass the module that calls it."""
    findings = migrate_source(_UNCALLED, style="global").findings
    assert ["PM612"] == [f.code for f in findings]  # one finding: the blocker is inside
    assert "`make_update_fn` has no caller in the paths given" in findings[0].message
    assert findings[0].message.endswith("(PM603)")


_READ_ONCE = (ROOT / "tests" / "fixtures_global" / "partial_arguments_evaluated_once"
              / "before.py").read_bytes()


def test_a_keyword_only_parameter_the_partial_leaves_keeps_the_contract():
    """Bound by the partial, a keyword-only parameter is fixed for every call; left to the
    calls, pmap would map it per call (one in_specs tuple does not describe that)."""
    assert _codes(_READ_ONCE) == ["PM600", "PM600"]
    source = _READ_ONCE.replace(b', metrics_fn=make_metrics("train"))', b")")
    assert any(code == "PM602" and "keyword-only parameters" in message
               for code, _, message in _findings(source))


def test_a_factory_use_that_does_not_fit_is_named_with_its_line():
    source = _TUPLE.replace(b"    step, shown_lr, tag = make_trainer(0.1)",
                            b"    made = make_trainer(0.1)\n    step, shown_lr, tag = made")
    (message,) = [m for code, line, m in _findings(source) if code == "PM601"]
    assert message.startswith("this pmap is returned by `make_trainer` at position 0 of a tuple, "
                              "and line 21 does not unpack that tuple into names")
    # `update_fn = make_update_fn(0.1)` (line 15): that name is then used otherwise
    alone = _FACTORY.replace(b"    return np.asarray(w[0])",
                             b"    steps = [update_fn, make_update_fn(0.2)]\n"
                             b"    return np.asarray(w[0])")
    (message,) = [m for code, line, m in _findings(alone) if code == "PM601"]
    assert "returned by `make_update_fn`, and line 15 keeps its result other than called on " \
        "the spot" in message


# A function value is a value: the nested def a module function returns, bound to a name that
# the caller then rebinds to its pmap (Mava's `learn = get_learner_fn(...)`), is the mapped
# function (the fixture pairs closure_returned_by_factory, closure_factory_reads_caller_stack
# and fallback_closure_factory_shared show the rewrites and run them).
_CLOSURE = (ROOT / "tests" / "fixtures_global" / "closure_returned_by_factory"
            / "before.py").read_bytes()


def test_a_factory_closure_rebound_to_its_pmap_goes_global():
    assert _codes(_CLOSURE) == ["PM600"]
    assert pmap_contract_code(_global_text(_CLOSURE)) == []


@pytest.mark.parametrize("old, new", [
    # an early return: which def the call yields is known when it runs
    (b"    def apply(w, x):", b"    if lr < 0:\n        return None\n\n    def apply(w, x):"),
    # the returned name rebound in the factory, or the def decorated
    (b"    return learner_fn", b"    learner_fn = jax.jit(learner_fn)\n    return learner_fn"),
    (b"    def learner_fn(w, x):", b"    @jax.checkpoint\n    def learner_fn(w, x):"),
    # the factory's result read before it is mapped
    (b"    learn = jax.pmap(learn", b"    print(learn)\n    learn = jax.pmap(learn"),
    # static arguments: the jitted def `learn` would read itself as the closure
    (b'jax.pmap(learn, axis_name="device")',
     b'jax.pmap(learn, axis_name="device", static_broadcasted_argnums=(2,))'),
])
def test_a_factory_closure_not_provably_the_mapped_def_keeps_the_contract(old, new):
    assert old in _CLOSURE
    source = _CLOSURE.replace(old, new)
    if b"static_broadcasted_argnums" in new:
        source = source.replace(b"def learner_fn(w, x):", b"def learner_fn(w, x, k):") \
            .replace(b"learn(w, x)", b"learn(w, x, 1)")
    assert "PM600" not in _codes(source)


def test_a_factory_closure_whose_factory_another_module_uses_names_that_use():
    """The rewrite may edit the returned def's body (a per-device result expanded): another
    module calling the factory would get the edited def."""
    tree = TreeContext(used_elsewhere={"get_learner_fn": "evaluator.py:12"})
    findings = with_named_blockers(migrate_source(_CLOSURE, style="global", tree=tree).findings)
    assert [(f.code, f.message) for f in findings if f.code == "PM603"] == [(
        "PM603", "`learn` maps the def `get_learner_fn` returns, which another module uses "
        "(evaluator.py:12) and would see edited")]
    assert "PM600" not in [f.code for f in findings]


# Decorators that keep a function's behaviour (a cache of its results, its metadata copied) do
# not hide the pmaps it builds (the fixture pair factory_under_lru_cache runs one).
_CACHED = (ROOT / "tests" / "fixtures_global" / "factory_under_lru_cache"
           / "before.py").read_bytes()
_CACHE_LINE = b"@functools.lru_cache(maxsize=None)\n"


@pytest.mark.parametrize("decorator", [
    b"@functools.lru_cache(maxsize=None)\n", b"@functools.cache\n", b"@functools.lru_cache\n",
    b"@lru_cache(None)\n", b"@functools.wraps(jnp.sum)\n",
])
def test_a_factory_under_a_behaviour_keeping_decorator_goes_global(decorator):
    source = _CACHED.replace(_CACHE_LINE, decorator).replace(
        b"import functools\n", b"import functools\nfrom functools import lru_cache\n")
    assert _codes(source) == ["PM600"]


@pytest.mark.parametrize("decorator", [b"@timed\n", b"@jax.named_call\n"])
def test_a_factory_under_another_decorator_keeps_the_contract(decorator):
    """A decorator of the project's (or any other) may call the function any number of times
    or not at all, and hand back anything: the factory's pmap is not followed."""
    source = _CACHED.replace(_CACHE_LINE, decorator).replace(
        b"\n\n@", b"\n\ndef timed(f):\n    return f\n\n\n@", 1)
    assert "PM600" not in _codes(source)


def test_a_factory_closure_under_lru_cache_goes_global():
    source = _CLOSURE.replace(b"import jax\n", b"import functools\n\nimport jax\n", 1).replace(
        b"def get_learner_fn(", b"@functools.lru_cache(None)\ndef get_learner_fn(")
    assert _codes(source) == ["PM600"]


def test_a_class_held_factory_under_lru_cache_goes_global():
    """`self.step = make_step(lr)` of a cached factory: the class reads the factory's pmap as
    it reads an undecorated one's (the fixture pair class_held_factory runs that one)."""
    held = (ROOT / "tests" / "fixtures_global" / "class_held_factory" / "before.py").read_bytes()
    source = held.replace(b"import jax\n", b"import functools\n\nimport jax\n", 1).replace(
        b"def make_step(", b"@functools.lru_cache(None)\ndef make_step(")
    assert _codes(source) == ["PM600"]
    assert _codes(source.replace(b"@functools.lru_cache(None)", b"@jax.named_call")) != ["PM600"]


_CLOSURE_IN_TUPLE = (ROOT / "tests" / "fixtures_global" / "closure_factory_returned_in_a_tuple"
                     / "before.py").read_bytes()


def test_a_factory_closure_pmapped_and_returned_in_a_tuple_goes_global():
    assert _codes(_CLOSURE_IN_TUPLE) == ["PM600"]


@pytest.mark.parametrize("old, new", [
    # the closure's factory is read elsewhere too: that use would see its def edited
    (b"    return np.asarray(w[0])", b"    extra = make_learner(0.2)\n    return np.asarray(w[0])"),
    # the returned tuple is kept whole: its pmap's calls are not all seen
    (b"    learn, steps = setup(0.1)", b"    pair = setup(0.1)\n    learn, steps = pair"),
    # the closure is read before it is mapped
    (b"    learn = jax.pmap(learn,", b"    print(learn)\n    learn = jax.pmap(learn,"),
])
def test_a_returned_factory_closure_not_provably_only_called_keeps_the_contract(old, new):
    assert old in _CLOSURE_IN_TUPLE
    assert "PM600" not in _codes(_CLOSURE_IN_TUPLE.replace(old, new))


@pytest.mark.parametrize("used", ["setup", "make_learner"])
def test_a_returned_factory_closure_another_module_uses_keeps_the_contract(used):
    """Another module calling the function that returns the pmap calls it where this module
    cannot see; one calling the closure's factory would get its def edited."""
    tree = TreeContext(used_elsewhere={used: "other.py:3"})
    findings = with_named_blockers(
        migrate_source(_CLOSURE_IN_TUPLE, style="global", tree=tree).findings)
    assert "PM600" not in [f.code for f in findings]
    assert any("other.py:3" in f.message for f in findings if f.code == "PM603")
