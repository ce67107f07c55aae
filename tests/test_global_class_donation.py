"""`--style global` for a class-held pmap that donates (transforms/global_view/
donation_classes.py): the donated-read check follows values through the instance's attributes
and methods. Each case varies one thing on a small trainer whose first trip donates a stack
pmap only donated a copy of; the fixtures class_held_donated_flag, class_held_donating_learner
and fallback_class_donat* are run on 8 devices by test_global_view.py."""

from __future__ import annotations

import pytest

from transforms.pipeline import migrate_source
from site_findings_view import with_named_blockers

TRAINER = '''import jax
import jax.numpy as jnp
import numpy as np


def make_step(lr, axis_name="batch"):
    def step(w, x):
        grad = jax.lax.pmean(jnp.mean(x, axis=0), axis_name)
        return w - lr * grad, jax.lax.pmean(jnp.sum(x), axis_name)

    return jax.pmap(step, axis_name=axis_name, donate_argnums=0)


class Trainer:
    def __init__(self, lr):
        self.step = make_step(lr)
        self.w = None

    def init(self, n):
        self.w = jnp.zeros((n, 3))

    def fit(self, x, epochs):
        losses = []
        for _ in range(epochs):
            old = self.w
            self.w, loss = self.step(old, x)
            losses.append(float(loss[0]))
            self.deleted = old.is_deleted()
        return losses


def run():
    n = jax.local_device_count()
    x = np.ones((n, 4, 3), np.float32)
    trainer = Trainer(0.1)
    trainer.init(n)
    losses = trainer.fit(x, epochs=3)
    return {"w": np.asarray(trainer.w), "losses": np.asarray(losses),
            "deleted": np.asarray(trainer.deleted)}
'''


def _findings(source: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for finding in with_named_blockers(migrate_source(source.encode(), style="global").findings):
        found.setdefault(finding.code, []).append(f"{finding.line}: {finding.message}")
    return found


def _edit(*pairs) -> str:
    source = TRAINER
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


@pytest.mark.parametrize("edits", [
    (),
    # fit called twice: the second call's trips donate only the step's own results
    ((("    losses = trainer.fit(x, epochs=3)\n",
       "    trainer.fit(x, epochs=2)\n    losses = trainer.fit(x, epochs=3)\n"),)),
    # the trip count is a module constant, passed positionally
    ((("    losses = trainer.fit(x, epochs=3)", "    losses = trainer.fit(x, EPOCHS)"),
      ("def run():", "EPOCHS = 3\n\n\ndef run():"))),
    # ... or the parameter's default
    ((("    def fit(self, x, epochs):", "    def fit(self, x, epochs=3):"),
      ("trainer.fit(x, epochs=3)", "trainer.fit(x)"))),
    # the stack read before the call, through an alias taken in the creating function
    ((("    losses = trainer.fit(x, epochs=3)\n",
       "    first = np.asarray(trainer.w)\n    losses = trainer.fit(x, epochs=3)\n"),)),
], ids=["as-is", "fit-twice", "module-constant", "default", "read-before"])
def test_the_donating_trainer_goes_global(edits):
    found = _findings(_edit(*edits))
    assert "PM600" in found and "PM609" not in found, found


@pytest.mark.parametrize("edits, line, words", [
    ((("trainer.fit(x, epochs=3)", "trainer.fit(x, epochs=1)"),), 28, "is read after"),
    ((("trainer.fit(x, epochs=3)", "trainer.fit(x, epochs=n)"),), 28, "is read after"),
    ((("        losses = []\n", "        losses = []\n        epochs = epochs + 0\n"),), 29,
     "is read after"),
    ((("            old = self.w\n", "            if epochs > 9:\n                break\n"
       "            old = self.w\n"),), 30, "is read after"),
    ((("            losses.append(float(loss[0]))\n",
       "            losses.append(float(loss[0]))\n            losses.append(self.deleted)\n"),),
     29, "is read after"),
    ((("            losses.append(float(loss[0]))\n",
       "            losses.append(float(loss[0]))\n            self.peek()\n"),
      ("    def fit(self, x, epochs):", "    def peek(self):\n        return self.deleted\n\n"
       "    def fit(self, x, epochs):")), 32, "is read after"),
    ((("    losses = trainer.fit(x, epochs=3)\n",
       "    try:\n        losses = trainer.fit(x, epochs=3)\n    except ValueError:\n"
       "        losses = []\n"),), 28, "is read after"),
    ((("    trainer.init(n)\n", "    trainer.init(n)\n    start = trainer.w\n"),
      ('"deleted": np.asarray(trainer.deleted)}',
       '"deleted": np.asarray(trainer.deleted),\n            "start": np.asarray(start)}')),
     41, "`start` is read after"),
    ((("        self.w = jnp.zeros((n, 3))\n",
       "        self.w = jnp.zeros((n, 3))\n        self.first = {\"w\": self.w}\n"),
      ("    def fit(self, x, epochs):",
       "    def first_w(self):\n        return np.asarray(self.first[\"w\"])\n\n"
       "    def fit(self, x, epochs):"),
      ('"deleted": np.asarray(trainer.deleted)}',
       '"deleted": np.asarray(trainer.deleted),\n            "first": trainer.first_w()}')),
     24, "`self.first` is read after"),
    ((("    trainer.init(n)\n", "    trainer.init(n)\n    other = trainer\n"),), 37,
     "used other than as `trainer.<attribute>`"),
    ((("    trainer = Trainer(0.1)\n", "    trainer = Trainer(0.1)\n    spare = Trainer(0.2)\n"),),
     35, "used more than once in the module (lines 35, 36)"),
    ((("    n = jax.local_device_count()\n", "    global trainer\n    n = jax.local_device_count()\n"),),
     36, "declared global"),
], ids=["one-trip", "trip-count-unknown", "trip-count-rebound", "loop-may-break",
        "flag-read-in-loop", "flag-read-by-a-method-in-loop", "fit-in-try", "caller-alias",
        "other-method", "instance-aliased", "second-instance", "instance-global"])
def test_a_read_of_the_donated_stack_keeps_the_trainer_faithful(edits, line, words):
    found = _findings(_edit(*edits))
    assert "PM600" not in found, found
    assert any(m.startswith(f"{line}: ") and words in m for m in found.get("PM609", [])), found


def test_a_method_publishing_the_stack_as_a_global_keeps_the_trainer_faithful():
    source = _edit(("    def init(self, n):\n        self.w = jnp.zeros((n, 3))\n",
                    "    def init(self, n):\n        global FIRST\n"
                    "        self.w = jnp.zeros((n, 3))\n        FIRST = self.w\n"))
    found = _findings(source)
    assert "PM600" not in found, found
    assert any("`FIRST` may hold" in m for m in found.get("PM609", [])), found


BOUND = _edit(
    ("    def __init__(self, lr):\n        self.step = make_step(lr)\n",
     "    def __init__(self, lr):\n        self.lr = lr\n"
     "        self.step = jax.pmap(self._step, axis_name=\"batch\", donate_argnums=0)\n"),
    ("    def init(self, n):",
     "    def _step(self, w, x):\n        grad = jax.lax.pmean(jnp.mean(x, axis=0), \"batch\")\n"
     "        return w - self.lr * grad, jax.lax.pmean(jnp.sum(x), \"batch\")\n\n"
     "    def init(self, n):"))


def test_a_bound_method_step_that_donates_goes_global():
    found = _findings(BOUND)
    assert "PM600" in found and "PM609" not in found, found


def test_a_method_used_as_a_value_keeps_the_trainer_faithful():
    source = BOUND.replace("        losses = []\n",
                           "        losses = []\n        grad_fn = self._step\n")
    found = _findings(source)
    assert "PM600" not in found, found
    assert any("used as a value" in m for m in found.get("PM609", [])), found
