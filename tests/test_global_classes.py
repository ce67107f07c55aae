"""`--style global` for pmaps held by a class (transforms/global_view/classes.py): what goes
global, and each blocker that keeps the class faithful with a finding naming it. The fixture
pairs under tests/fixtures_global/class_held_* and fallback_class_* are run on 8 devices by
test_global_view.py; these cases vary one thing each on a small trainer."""

from __future__ import annotations

import sys

import pytest

from conftest import original_python
from equivalence.check import compare_runs
from equivalence.runner import run_entry
from transforms.contract_names import pmap_contract_code
from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

TRAINER = '''import jax
import jax.numpy as jnp
import numpy as np


class Trainer:
    def __init__(self, lr):
        self.lr = lr
        self.step = jax.pmap(self._step, axis_name="batch")
        self.w = None

    def _step(self, w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
        return w - self.lr * grad

    def init(self, n):
        self.w = jnp.zeros((n, 3))

    def fit(self, x):
        for _ in range(2):
            self.w = self.step(self.w, x)
        return self.w


def run():
    n = jax.local_device_count()
    trainer = Trainer(0.1)
    trainer.init(n)
    x = np.ones((n, 4, 3), np.float32)
    w = trainer.fit(x)
    return {"w": np.asarray(w[0])}
'''


def _findings(source: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in with_named_blockers(migrate_source(source.encode(), style="global").findings):
        found.setdefault(finding.code, []).append(f"{finding.line}: {finding.message}")
    return found


def _migrated(source: str) -> str:
    return migrate_source(source.encode(), style="global").source.decode()


def test_the_trainer_goes_global():
    text = _migrated(TRAINER)
    assert "jax.jit(jax.shard_map(" in text and "jax.pmap" not in text
    assert "jnp.zeros((3,))" in text and '"w": np.asarray(w)' in text
    assert "PM600" in _findings(TRAINER)


def test_a_state_read_before_it_is_stored_settles():
    """`first` reads `self.seen` before `fit` stores it, in program order (a loop): the
    creator is analysed again once the attribute's kind is known, so `self.seen[0]` of the
    replicated state becomes direct use instead of indexing the unstacked value."""
    source = TRAINER.replace("        return self.w\n", "        self.seen = self.w\n"
                             "        return self.w\n\n    def first(self):\n"
                             "        return self.seen[0]\n")
    source = source.replace("    w = trainer.fit(x)\n", "    first = None\n"
                            "    for epoch in range(2):\n        if epoch:\n"
                            "            first = trainer.first()\n        w = trainer.fit(x)\n")
    source = source.replace('"w": np.asarray(w[0])', '"w": np.asarray(w[0]), "first": first')
    assert "PM600" in _findings(source), _findings(source)
    text = _migrated(source)
    assert "        return self.seen\n" in text and "self.seen[0]" not in text


@pytest.mark.parametrize("edit, code, words", [
    # the instance is returned from the function that made it
    (('return {"w": np.asarray(w[0])}', 'return trainer'), "PM609", "is returned"),
    # a special method Python runs implicitly
    (("    def init(self, n):", "    def __getattr__(self, name):\n        return None\n\n"
      "    def init(self, n):"), "PM609", "run by Python implicitly"),
    # the mapped method reads an attribute whose layout the migration changes
    (("return w - self.lr * grad", "return w - self.lr * grad + 0 * self.w"), "PM609",
     "whose layout the migration changes"),
    # one attribute holds a replicated stack and a per-device batch
    (("    w = trainer.fit(x)", "    trainer.w = np.random.RandomState(0).normal(size=(n, 3))\n"
      "    w = trainer.fit(x)"), "PM605", "holds both"),
    # a method called with two layouts: one migrated text cannot serve both
    (("    w = trainer.fit(x)", "    w = trainer.fit(x)\n    trainer.init(n)\n"
      "    trainer.w = jnp.stack([jnp.zeros(3)] * n)\n"
      "    other = trainer.fit(x.sum(-1, keepdims=True))"),
     None, None),
    # the instance called without a __call__
    (("    w = trainer.fit(x)", "    w = trainer(x)"), "PM609", "no `__call__`"),
    # a class-level reference (a second instance made at module level)
    (("def run():", "DEFAULT = Trainer(0.5)\n\n\ndef run():"), "PM609", "at module level"),
    # a method replaced on the instance, and the instance's __dict__ read
    (("    w = trainer.fit(x)", "    trainer.fit = print\n    w = trainer.fit(x)"),
     "PM609", "replaces a method"),
    (("    w = trainer.fit(x)", "    w = trainer.fit(x)\n    print(trainer.__dict__)"),
     "PM609", "__dict__"),
    # made in two functions
    (("def run():", "def other():\n    return Trainer(0.5)\n\n\ndef run():"), "PM609",
     "several functions"),
])
def test_each_blocker_keeps_the_class_faithful(edit, code, words):
    source = TRAINER.replace(*edit)
    assert source != TRAINER
    found = _findings(source)
    assert "PM600" not in found, found
    if code is not None:
        assert any(words in message for message in found.get(code, [])), found


def test_a_closure_over_an_init_local_whose_layout_changes_stays_faithful():
    source = TRAINER.replace(
        '        self.step = jax.pmap(self._step, axis_name="batch")',
        '        n = jax.local_device_count()\n        offset = jnp.zeros((n, 3))\n\n'
        '        def step(w, x):\n'
        '            return w + offset[0] * jax.lax.pmean(x[0], "batch")\n\n'
        '        self.step = jax.pmap(step, axis_name="batch")')
    found = _findings(source)
    assert "PM600" not in found
    # the nested def is refused where it stands (PM605) or as the mapped closure (PM609)
    assert any("`offset`" in m for m in found.get("PM605", []) + found.get("PM609", [])), found


def test_a_global_caller_of_a_faithful_class_stays_faithful():
    """Code kept faithful must not run under the caller's mesh."""
    source = TRAINER.replace("        self.w = None\n", "        self.w = None\n"
                             '        self.other = jax.pmap(lambda v: v, axis_name="batch")\n'
                             "\n    def reset(self):\n        self.other = abs\n")
    source = source.replace("def run():", '@jax.pmap\ndef double(v):\n    return 2 * v\n\n\n'
                            "def run():").replace(
        '    return {"w": np.asarray(w[0])}',
        '    d = double(jnp.stack([jnp.ones(2)] * n))\n'
        '    return {"w": np.asarray(w[0]), "d": np.asarray(d[0])}')
    found = _findings(source)
    assert "PM600" not in found, found
    assert any("assigned again" in m for m in found.get("PM609", [])), found
    assert any("calls `Trainer`" in m for m in found.get("PM608", [])), found


def test_a_class_in_a_multiprocess_module_stays_faithful():
    source = TRAINER.replace("    n = jax.local_device_count()\n",
                             "    n = jax.local_device_count()\n    rank = jax.process_index()\n")
    found = _findings(source)
    assert "PM600" not in found
    assert any("multi-process" in m for m in found.get("PM607", [])), found


def test_a_factory_given_a_changed_value_stays_faithful():
    source = '''import jax
import jax.numpy as jnp
import numpy as np


def make_step(scale):
    return jax.pmap(lambda x: jax.lax.psum(x, "i") * scale, axis_name="i")


class Model:
    def __init__(self, n):
        scale = jnp.stack([jnp.ones(())] * n)
        self.step = make_step(scale)

    def total(self, x):
        return self.step(x)


def run():
    n = jax.local_device_count()
    model = Model(n)
    return {"t": np.asarray(model.total(np.ones((n, 2), np.float32)))}
'''
    found = _findings(source)
    assert "PM600" not in found
    assert any("pmap factory `make_step`" in m for m in found.get("PM605", [])), found
    assert "PM600" in _findings(source.replace("= make_step(scale)", "= make_step(2.0)"))


def test_a_stack_appended_to_an_alias_of_a_list_attribute_is_refused():
    """The attribute's kind would not see the append: the list is a plain value once read."""
    source = TRAINER.replace("        self.w = None\n", "        self.w = None\n"
                             "        self.history = []\n")
    source = source.replace("            self.w = self.step(self.w, x)\n",
                            "            self.w = self.step(self.w, x)\n"
                            "            history = self.history\n"
                            "            history.append(self.w)\n")
    source = source.replace('"w": np.asarray(w[0])', '"w": np.asarray(w[0]), '
                            '"h": np.asarray(trainer.history)')
    found = _findings(source)
    assert "PM600" not in found, found
    assert "PM600" in _findings(source.replace("history.append(self.w)",
                                               "history.append(float(self.w[0][0]))"))


# -- a held pmap built in a method other than `__init__` ----------------------------------------
# Experiment frameworks build their steps when training starts (jaxline's `_initialize_train`):
# an attribute assigned once, by a statement of a method's own body, is the class's held pmap
# whichever method builds it, since every `self.step(...)` reaches that one pmap.
LAZY_TRAINER = TRAINER.replace(
    '        self.step = jax.pmap(self._step, axis_name="batch")\n', "").replace(
    "    def init(self, n):\n        self.w = jnp.zeros((n, 3))\n",
    "    def init(self, n):\n        self.w = jnp.zeros((n, 3))\n"
    '        self.step = jax.pmap(self._step, axis_name="batch", donate_argnums=(0,))\n').replace(
    "    x = np.ones((n, 4, 3), np.float32)", "    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)")


def _equivalent_on_8_devices(source: str, tmp_path) -> None:
    """The original and its global migration run on 8 fake devices give the same outputs,
    compared through the layout map the migration records."""
    migration = migrate_source(source.encode(), style="global")
    for side, text in (("orig", source.encode()), ("new", migration.source)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "case.py").write_bytes(text)
    python = original_python(source.encode())
    original = run_entry(tmp_path / "orig", "case:run", devices=8, python=python)
    migrated = run_entry(tmp_path / "new", "case:run", devices=8)
    assert original.ok, original.error
    assert migrated.ok, migrated.error
    layouts = {f.function: f.outputs for f in migration.layouts}
    report = compare_runs("case:run", 8, original, migrated, same_jax=python == sys.executable,
                          layouts=layouts.get("run", ()))
    assert report.verdict == "equivalent", report.differences


def test_a_pmap_built_in_another_method_goes_global():
    assert LAZY_TRAINER != TRAINER and "def __init__(self, lr):\n        self.lr = lr\n" \
        "        self.w = None\n" in LAZY_TRAINER
    found = _findings(LAZY_TRAINER)
    assert "PM600" in found and "PM609" not in found, found
    text = _migrated(LAZY_TRAINER)
    assert pmap_contract_code(text) == [], pmap_contract_code(text)
    assert "        self.step = jax.jit(jax.shard_map(" in text and "jnp.zeros((3,))" in text


@pytest.mark.equivalence
def test_a_pmap_built_in_another_method_computes_the_same(tmp_path):
    _equivalent_on_8_devices(LAZY_TRAINER, tmp_path)


# -- the class's instances as its creator uses them ---------------------------------------------
# Two classes holding a pmap under the same attribute name, one built in a method after a
# `None` placeholder in `__init__`, both called on their instances by the function that creates
# them (as training scripts call `trainer.p_train_step(...)`).
TWO_HOLDERS = '''import jax
import jax.numpy as jnp
import numpy as np


def _sgd(w, x):
    return w - 0.1 * jax.lax.pmean(jnp.mean(x, axis=0), "batch")


class First:
    def __init__(self):
        self.p_step = jax.pmap(_sgd, axis_name="batch", donate_argnums=(0,))


class Second:
    def __init__(self):
        self.p_step = None

    def compile(self):
        self.p_step = jax.pmap(lambda w, x: w + jax.lax.psum(x, "batch"), axis_name="batch")


def run():
    n = jax.local_device_count()
    first = First()
    second = Second()
    second.compile()
    w = jnp.stack([jnp.zeros(3)] * n)
    v = jnp.stack([jnp.ones(3)] * n)
    for t in range(2):
        x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)
        y = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        w = first.p_step(w, x)
        v = second.p_step(v, y)
    return {"w": np.asarray(w[0]), "v": np.asarray(v)}
'''


def test_pmaps_called_on_instances_by_their_creator_go_global():
    """`first.p_step(...)` in `run`, which creates `first`, is followed like `self.p_step(...)`;
    `Second`'s `self.p_step` (a `None` placeholder, then the pmap) is another object's attribute
    than `First`'s, so neither rebinds the other."""
    found = _findings(TWO_HOLDERS)
    assert len(found.get("PM600", [])) == 2 and "PM612" not in found, found
    text = _migrated(TWO_HOLDERS)
    assert pmap_contract_code(text) == [], pmap_contract_code(text)
    assert "jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))" in text
    assert "reshape(n * 4, 3)" in text and '"w": np.asarray(w)' in text


@pytest.mark.equivalence
def test_pmaps_called_on_instances_by_their_creator_compute_the_same(tmp_path):
    _equivalent_on_8_devices(TWO_HOLDERS, tmp_path)


# A framework's base class builds the pmap in its `__init__`; the program instantiates the one
# class that inherits from it, whose method calls the pmap.
BASE_BUILT = '''import jax
import jax.numpy as jnp
import numpy as np


class BaseTrainer:
    def __init__(self, lr):
        self.lr = lr
        self.p_step = jax.pmap(self._step, axis_name="batch")

    def _step(self, w, x):
        return w - self.lr * jax.lax.pmean(jnp.mean(x, axis=0), "batch")


class Trainer(BaseTrainer):
    def __init__(self):
        super().__init__(0.1)

    def train_step(self, w, x):
        return self.p_step(w, x)


def run():
    n = jax.local_device_count()
    trainer = Trainer()
    w = jnp.stack([jnp.zeros(3)] * n)
    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)
    for _ in range(2):
        w = trainer.train_step(w, x)
    return {"w": np.asarray(w[0])}
'''


def test_a_pmap_built_by_the_base_class_of_the_instantiated_class_goes_global():
    found = _findings(BASE_BUILT)
    assert "PM600" in found and "PM612" not in found, found
    text = _migrated(BASE_BUILT)
    assert pmap_contract_code(text) == [], pmap_contract_code(text)
    assert "jnp.zeros(3)" in text and "jnp.stack" not in text and '"w": np.asarray(w)' in text


@pytest.mark.equivalence
def test_a_pmap_built_by_the_base_class_of_the_instantiated_class_computes_the_same(tmp_path):
    _equivalent_on_8_devices(BASE_BUILT, tmp_path)


@pytest.mark.parametrize("edit, words", [
    # a second subclass: whose instances run the base's pmap is not one class
    (("\n\ndef run():", "\n\nclass Other(BaseTrainer):\n    pass\n\n\ndef run():"),
     "is subclassed by"),
    # the base instantiated too
    (("    trainer = Trainer()\n", "    trainer = Trainer()\n    BaseTrainer(0.2)\n"),
     "other than as the base"),
])
def test_a_base_built_pmap_with_other_instances_keeps_the_contract(edit, words):
    source = BASE_BUILT.replace(*edit)
    assert source != BASE_BUILT
    found = _findings(source)
    assert any(words in m for m in found.get("PM612", [])), found


@pytest.mark.parametrize("edit, words", [
    # rebound on the instance by module code: which pmap a call reaches is not known
    (("    second.compile()\n", "    second.compile()\n    first.p_step = second.p_step\n"),
     "assigned again"),
    # read as a value: its calls are not all seen
    (("        w = first.p_step(w, x)\n", "        step = first.p_step\n        w = step(w, x)\n"),
     "other than as a call on an instance the analysis follows"),
    # called in a def nested in the creator, where the instance is not followed
    (("        w = first.p_step(w, x)\n",
      "        def apply(w, x):\n            return first.p_step(w, x)\n\n"
      "        w = apply(w, x)\n"),
     "other than as a call on an instance the analysis follows"),
    # a placeholder other than `None` stored by a method of the class
    (("        self.p_step = None\n", "        self.p_step = abs\n"), "assigned again"),
    # the creator reads the state it passed to the donating pmap after the call
    (("        w = first.p_step(w, x)\n",
      "        w2 = first.p_step(w, x)\n        seen = np.asarray(w)\n        w = w2\n"),
     "is read after `self.p_step` of `First`"),
])
def test_other_uses_of_an_instance_held_pmap_keep_the_contract(edit, words):
    source = TWO_HOLDERS.replace(*edit)
    assert source != TWO_HOLDERS
    found = _findings(source)
    assert any(words in m for messages in found.values() for m in messages), found
    text = _migrated(source)
    assert pmap_contract_code(text) != []


_NESTED_IN_METHOD = TRAINER.replace(
    '        self.step = jax.pmap(self._step, axis_name="batch")\n', "").replace(
    "    def init(self, n):\n        self.w = jnp.zeros((n, 3))\n",
    "    def init(self, n):\n        self.w = jnp.zeros((n, 3))\n"
    "        scale = np.float32(0.5)\n\n"
    "        def step(w, x):\n"
    '            return w - scale * jax.lax.pmean(jnp.mean(x, axis=0), "batch")\n\n'
    '        self.step = jax.pmap(step, axis_name="batch")\n').replace(
    "    x = np.ones((n, 4, 3), np.float32)", "    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)")


def test_a_def_nested_in_the_building_method_goes_global():
    found = _findings(_NESTED_IN_METHOD)
    assert "PM600" in found and "PM609" not in found, found
    assert pmap_contract_code(_migrated(_NESTED_IN_METHOD)) == []


@pytest.mark.equivalence
def test_a_def_nested_in_the_building_method_computes_the_same(tmp_path):
    _equivalent_on_8_devices(_NESTED_IN_METHOD, tmp_path)


def test_a_nested_def_closing_over_a_changed_local_of_its_method_stays_faithful():
    """`offset` is a replicated stack the migration unstacks; the mapped def reads `offset[0]`
    as its row, so it is refused where the building method closes over it."""
    source = _NESTED_IN_METHOD.replace(
        "        scale = np.float32(0.5)\n", "        scale = jnp.stack([jnp.ones(())] * n)\n"
    ).replace("return w - scale *", "return w - scale[0] *")
    assert source != _NESTED_IN_METHOD
    found = _findings(source)
    assert "PM600" not in found, found
    assert any("`scale`" in m for m in found.get("PM605", []) + found.get("PM609", [])), found


@pytest.mark.parametrize("edit, words", [
    # built in an `if` of the method: whether it is built is not the method's to say
    (("        self.step = jax.pmap(self._step, axis_name=\"batch\", donate_argnums=(0,))\n",
      "        if n > 1:\n"
      "            self.step = jax.pmap(self._step, axis_name=\"batch\", donate_argnums=(0,))\n"),
     "`self.<name> = ...` ("),
    # built in two methods: which pmap `self.step` reaches is not known
    (("    def fit(self, x):\n", "    def rebuild(self):\n"
      "        self.step = jax.pmap(self._step, axis_name=\"batch\")\n\n    def fit(self, x):\n"),
     "assigned again"),
])
def test_a_pmap_built_in_a_method_otherwise_stays_faithful(edit, words):
    source = LAZY_TRAINER.replace(*edit)
    assert source != LAZY_TRAINER
    found = _findings(source)
    assert "PM600" not in found, found
    assert any(words in m for m in found.get("PM609", [])), found


# -- a method of an object, called in a mapped body --------------------------------------------
# The replication proof (replication.py) reads a body's calls; `obj.apply(w)` may run any method
# of that name the module's classes define, so it is device-dependent when one of them reads the
# device (`jax.lax.axis_index`), even when its arguments are the same on every device.
SHIFTED = '''import jax
import jax.numpy as jnp
import numpy as np


class Shift:
    def apply(self, w):
        return w + jax.lax.axis_index("batch")


class Trainer:
    def __init__(self):
        self.shift = Shift()
        self.step = jax.pmap(self._step, axis_name="batch")
        self.w = None

    def _step(self, w, x):
        return self.shift.apply(w) + 0 * jax.lax.pmean(x, "batch")

    def init(self, n):
        self.w = jnp.zeros((n, 3))

    def fit(self, x):
        self.w = self.step(self.w, x)
        return self.w


def run():
    n = jax.local_device_count()
    trainer = Trainer()
    trainer.init(n)
    w = trainer.fit(np.ones((n, 3), np.float32))
    return {"w": np.asarray(w)}
'''


def test_a_method_that_reads_the_device_makes_its_result_per_device():
    """Before: out_specs=P() on `self.shift.apply(w)`, so every device got device 0's row."""
    found = _findings(SHIFTED)
    assert "PM600" not in found, found
    assert "out_specs=P()" not in _migrated(SHIFTED)
    # the same call of a method that does not read the device is replicated as before
    plain = SHIFTED.replace('w + jax.lax.axis_index("batch")', "w + 1.0")
    assert "PM600" in _findings(plain), _findings(plain)


@pytest.mark.equivalence
@pytest.mark.parametrize("reads_device", [True, False])
def test_a_method_called_in_a_mapped_body_computes_the_same(reads_device, tmp_path):
    source = SHIFTED if reads_device else SHIFTED.replace(
        'w + jax.lax.axis_index("batch")', "w + 1.0")
    _equivalent_on_8_devices(source, tmp_path)


def test_a_module_object_whose_call_reads_the_device_is_per_device():
    """The same for a lambda site closing over a module-level object: `OBJ(w)` runs its
    class's `__call__`."""
    source = '''import jax
import jax.numpy as jnp
import numpy as np


class Shift:
    def __call__(self, w):
        return w + jax.lax.axis_index("i")


SHIFT = Shift()
step = jax.pmap(lambda w: SHIFT(w), axis_name="i")


def run():
    n = jax.local_device_count()
    return {"w": np.asarray(step(jnp.zeros((n, 3))))}
'''
    assert "out_specs=P()" not in _migrated(source)
    assert "out_specs=P()" in _migrated(source.replace('w + jax.lax.axis_index("i")', "w + 1.0"))


# -- base classes in the module ----------------------------------------------------------------
# A class whose base classes are defined in the module (single inheritance, as an experiment
# framework's `Experiment(AbstractExperiment)`) is followed as its instances run it: the methods
# it inherits, a method overriding the base's of its name, and `super().name(...)` running the
# base's method on the same instance.
BASED = '''import jax
import jax.numpy as jnp
import numpy as np


class AbstractExperiment:
    def __init__(self, lr):
        self.lr = lr
        self.w = None

    def train_loop(self, x, steps):
        for _ in range(steps):
            self.w = self.step(self.w, x)
        return self.w


class Experiment(AbstractExperiment):
    def __init__(self, lr, n):
        super().__init__(lr)
        self.n = n

    def _train_fn(self, w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
        return w - self.lr * grad

    def _initialize_train(self):
        self.w = jnp.zeros((self.n, 3))
        self.train_fn = jax.pmap(self._train_fn, axis_name="batch", donate_argnums=(0,))

    def step(self, w, x):
        return self.train_fn(w, x)


def run():
    n = jax.local_device_count()
    experiment = Experiment(0.1, n)
    experiment._initialize_train()
    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)
    w = experiment.train_loop(x, 3)
    return {"w": np.asarray(w[0])}
'''

# The base's `__init__` stores a replicated stack, which only `super().__init__` runs, and a
# base method reads its row 0: both are edited for the instance's global layout.
BASED_INIT_STORES = '''import jax
import jax.numpy as jnp
import numpy as np


class AbstractExperiment:
    def __init__(self, lr, n):
        self.lr = lr
        self.w = jnp.stack([jnp.zeros(3)] * n)

    def train_loop(self, x, steps):
        for _ in range(steps):
            self.w = self.step(self.w, x)
        return self.w

    def first(self):
        return self.w[0]


class Experiment(AbstractExperiment):
    def __init__(self, lr, n):
        super().__init__(lr, n)
        self.n = n

    def _train_fn(self, w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
        return w - self.lr * grad

    def _initialize_train(self):
        self.train_fn = jax.pmap(self._train_fn, axis_name="batch", donate_argnums=(0,))

    def step(self, w, x):
        return self.train_fn(w, x)


def run():
    n = jax.local_device_count()
    experiment = Experiment(0.1, n)
    experiment._initialize_train()
    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3)
    w = experiment.train_loop(x, 3)
    return {"w": np.asarray(w[0]), "f": np.asarray(experiment.first())}
'''


@pytest.mark.parametrize("source", [BASED, BASED_INIT_STORES], ids=["based", "init_stores"])
def test_a_class_with_a_base_in_the_module_goes_global(source):
    found = _findings(source)
    assert "PM600" in found and "PM609" not in found, found
    assert pmap_contract_code(_migrated(source)) == []


def test_a_base_written_as_inheriting_from_object_is_followed():
    source = BASED.replace("class AbstractExperiment:", "class AbstractExperiment(object):")
    found = _findings(source)
    assert "PM600" in found and "PM609" not in found, found
    shadowed = source.replace("def run():", "object = dict\n\n\ndef run():")
    assert "PM600" not in _findings(shadowed)


def test_the_base_init_super_runs_is_followed():
    text = _migrated(BASED_INIT_STORES)
    assert "jnp.stack" not in text and "        return self.w\n" in text


@pytest.mark.equivalence
@pytest.mark.parametrize("source", [BASED, BASED_INIT_STORES], ids=["based", "init_stores"])
def test_a_class_with_a_base_in_the_module_computes_the_same(source, tmp_path):
    _equivalent_on_8_devices(source, tmp_path)


@pytest.mark.parametrize("edit, words", [
    # the base is instantiated too: its methods' edits would run for that instance
    (("    experiment = Experiment(0.1, n)\n",
      "    experiment = Experiment(0.1, n)\n    AbstractExperiment(0.2)\n"), "is used at line"),
    # a second subclass of the base
    (("def run():", "class Other(AbstractExperiment):\n    pass\n\n\ndef run():"),
     "is used at line"),
    # a base defined twice: which definition the subclass inherits from depends on the order
    (("class Experiment(AbstractExperiment):", "class AbstractExperiment:\n    pass\n\n\n"
      "class Experiment(AbstractExperiment):"), "not a class of this module"),
    # a base the module imports
    (("class AbstractExperiment:", "from collections import UserDict\n\n\n"
      "class AbstractExperiment(UserDict):"), "not a class of this module"),
    # two bases
    (("class Experiment(AbstractExperiment):", "class Mixin:\n    pass\n\n\n"
      "class Experiment(AbstractExperiment, Mixin):"), "and others"),
    # super() kept as a value
    (("        super().__init__(lr)\n", "        parent = super()\n        parent.__init__(lr)\n"),
     "other than as `super().method(...)`"),
    # a base method that is decorated
    (("    def train_loop(self, x, steps):", "    @staticmethod\n    def helper():\n"
      "        return 1\n\n    def train_loop(self, x, steps):"), "decorated"),
    # super() reaching no method of the bases (object's)
    (("        self.n = n\n", "        self.n = n\n        super().reset()\n"),
     "reaches no method of its base classes"),
])
def test_a_class_whose_bases_are_not_all_followed_stays_faithful(edit, words):
    source = BASED.replace(*edit)
    assert source != BASED
    found = _findings(source)
    assert "PM600" not in found, found
    assert any(words in m for m in found.get("PM609", [])), found


def test_a_donated_value_a_base_method_reads_keeps_the_class_faithful():
    source = BASED.replace("            self.w = self.step(self.w, x)\n",
                           "            old = self.w\n            self.w = self.step(self.w, x)\n"
                           "            self.seen = old + 1\n")
    found = _findings(source)
    assert "PM600" not in found, found
    assert any("`old` is read after" in m for m in found.get("PM609", [])), found


# -- a mapped method that uses the class's other methods ---------------------------------------
# `self._loss(w, x)` and `jax.value_and_grad(self._loss)` in the mapped method: the methods it
# runs through `self` are traced with it, under the same rule (they read plain attributes and
# use plain methods; nothing else of `self`), and the attributes they read keep their layout.
SELF_CALLS = '''import jax
import jax.numpy as jnp
import numpy as np


class Trainer:
    def __init__(self, lr):
        self.lr = lr
        self.scale = 0.5
        self.step = jax.pmap(self._step, axis_name="batch")
        self.w = None

    def _loss(self, w, x):
        return self.scale * jnp.mean((x @ w) ** 2)

    def _step(self, w, x):
        loss, grad = jax.value_and_grad(self._loss)(w, x)
        grad = jax.lax.pmean(grad, "batch")
        return w - self.lr * grad, jax.lax.pmean(self._loss(w, x) + 0 * loss, "batch")

    def init(self, n):
        self.w = jnp.stack([jnp.ones(3)] * n)

    def fit(self, x):
        losses = []
        for _ in range(2):
            self.w, loss = self.step(self.w, x)
            losses.append(loss)
        return self.w, losses


def run():
    n = jax.local_device_count()
    trainer = Trainer(0.1)
    trainer.init(n)
    x = np.arange(n * 12, dtype=np.float32).reshape(n, 4, 3) / 10
    w, losses = trainer.fit(x)
    return {"w": np.asarray(w[0]), "loss": np.asarray([l[0] for l in losses])}
'''


def test_a_mapped_method_that_uses_other_methods_goes_global():
    found = _findings(SELF_CALLS)
    assert "PM600" in found and "PM609" not in found, found
    assert pmap_contract_code(_migrated(SELF_CALLS)) == []


@pytest.mark.equivalence
def test_a_mapped_method_that_uses_other_methods_computes_the_same(tmp_path):
    _equivalent_on_8_devices(SELF_CALLS, tmp_path)


def test_a_method_passed_to_a_transform_that_reads_the_device_is_per_device():
    """`jax.grad(self._tilt)` of a method reading `axis_index`: the update differs per device,
    so it is not given out_specs=P()."""
    source = SELF_CALLS.replace(
        '        return w - self.lr * grad, jax.lax.pmean(self._loss(w, x) + 0 * loss, "batch")',
        '        return w - self.lr * grad - jax.grad(self._tilt)(w), jax.lax.pmean(loss, "batch")'
        '\n\n    def _tilt(self, w):\n        return jnp.sum(w) * jax.lax.axis_index("batch")')
    assert source != SELF_CALLS
    assert "out_specs=P()" not in _migrated(source)


@pytest.mark.parametrize("edit, words", [
    # a method the mapped method runs stores on `self` inside the trace
    (("    def _loss(self, w, x):\n", "    def _loss(self, w, x):\n        self.seen = x\n"),
     "uses `self` other than to read a plain attribute or use a plain method"),
    # it reads an attribute whose layout the migration changes
    (("jnp.mean((x @ w) ** 2)", "jnp.mean((x @ w) ** 2) + 0 * jnp.sum(self.w[0])"),
     "whose layout the migration changes"),
])
def test_a_method_the_mapped_method_runs_is_held_to_its_rule(edit, words):
    source = SELF_CALLS.replace(*edit)
    assert source != SELF_CALLS
    found = _findings(source)
    assert "PM600" not in found, found
    assert any(words in m for m in found.get("PM609", [])), found


# -- properties ----------------------------------------------------------------------------------
# `@property def train_inputs(self)` (kfac's experiment): reading the attribute runs the method,
# so it is followed where it is read, like a call of it with no arguments; `x is None` reads
# whether x is None, whatever x's layout (the property's lazy initialisation).
PROPERTIES = '''import jax
import jax.numpy as jnp
import numpy as np


class Experiment:
    def __init__(self, n):
        self.n = n
        self._train_input = None
        self.w = jnp.stack([jnp.zeros(3)] * n)
        self.step = jax.pmap(self._step, axis_name="batch")

    @property
    def train_inputs(self):
        if self._train_input is None:
            self._train_input = np.arange(self.n * 12, dtype=np.float32).reshape(self.n, 4, 3)
        return self._train_input

    @property
    def scale(self):
        return 0.5

    def _step(self, w, x):
        return w - self.scale * jax.lax.pmean(jnp.mean(x, axis=0), "batch")

    def train(self):
        for _ in range(2):
            self.w = self.step(self.w, self.train_inputs)
        return self.w


def run():
    n = jax.local_device_count()
    experiment = Experiment(n)
    w = experiment.train()
    return {"w": np.asarray(w[0])}
'''


def test_a_class_with_properties_goes_global():
    found = _findings(PROPERTIES)
    assert "PM600" in found and "PM609" not in found, found
    text = _migrated(PROPERTIES)
    assert pmap_contract_code(text) == [] and ".reshape(self.n * 4, 3)" in text


@pytest.mark.equivalence
def test_a_class_with_properties_computes_the_same(tmp_path):
    _equivalent_on_8_devices(PROPERTIES, tmp_path)


@pytest.mark.parametrize("edit, words", [
    # a donating pmap: the donated-read check does not follow property reads
    (('axis_name="batch")', 'axis_name="batch", donate_argnums=(0,))'), "is a property"),
    # the property's value called
    (("    w = experiment.train()\n", "    experiment.scale()\n    w = experiment.train()\n"),
     "calls what the property"),
    # `property` rebound by the module: the decorator is not the builtin
    (("class Experiment:", "property = staticmethod\n\n\nclass Experiment:"), "decorated"),
    # the mapped method reads a property that reads an attribute whose layout changes
    (("        return 0.5\n", "        return 0.5 + 0 * self.w[0][0]\n"),
     "whose layout the migration changes"),
])
def test_a_property_not_followed_keeps_the_class_faithful(edit, words):
    source = PROPERTIES.replace(*edit)
    assert source != PROPERTIES
    found = _findings(source)
    assert "PM600" not in found, found
    assert any(words in m for m in found.get("PM609", [])), found


# Two held pmaps of different axis names called only through the instance: no statement of
# the creator calls them by name, so none can be put under its own mesh (an internal error,
# `max()` of no axis, before the caller's planner refused it).
TWO_AXES = '''import jax
import jax.numpy as jnp
import numpy as np


class Trainer:
    def __init__(self):
        self.a = jax.pmap(lambda w, x: w - 0.1 * jax.lax.pmean(x, "batch"), axis_name="batch")
        self.b = jax.pmap(lambda w, x: w + jax.lax.psum(x, "i"), axis_name="i")

    def fit(self, w, v, x):
        return self.a(w, x), self.b(v, x)


def run():
    n = jax.local_device_count()
    trainer = Trainer()
    w = jnp.stack([jnp.zeros(3)] * n)
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    w, v = trainer.fit(w, w, x)
    return {"w": np.asarray(w[0]), "v": np.asarray(v[0])}
'''


@pytest.mark.parametrize("source", [
    TWO_AXES,
    TWO_AXES.replace("    w, v = trainer.fit(w, w, x)\n",
                     "    w, v = trainer.a(w, x), trainer.b(w, x)\n"),
], ids=["through_a_method", "on_the_instance"])
def test_held_pmaps_of_two_axis_names_keep_the_contract(source):
    found = _findings(source)
    assert "PM005" not in found, found
    assert any("different axis names (batch, i)" in m for m in found.get("PM612", [])), found
    assert pmap_contract_code(_migrated(source)) != []


@pytest.mark.equivalence
def test_held_pmaps_of_two_axis_names_compute_the_same(tmp_path):
    _equivalent_on_8_devices(TWO_AXES, tmp_path)
