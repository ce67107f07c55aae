"""`--style global` for a pmap built and called inside one method (method_locals.py): the
method is read as a caller of its own, and what the site gives back must stay in it. The
fixture pairs method_local_pmap and fallback_method_local_* are run on 8 devices by
test_global_view.py; these cases vary one use of the result each."""

from __future__ import annotations

import pytest

from transforms.contract_names import pmap_contract_code
from transforms.pipeline import migrate_source

METHOD = '''import jax
import numpy as np


class Trainer:
    def run(self, x, state):
        n = jax.local_device_count()
        double = jax.pmap(lambda v: v * 2.0 + jax.lax.psum(v, "i"), axis_name="i")
        out = double(np.broadcast_to(x, (n,) + x.shape))
        USE
        return 0

    def consume(self, v):
        return v.shape


def run():
    return Trainer().run(np.arange(4.0, dtype=np.float32), {})
'''


def _migrate(use: str):
    result = migrate_source(METHOD.replace("USE", use).encode(), style="global")
    return result.source.decode(), {f.code: f.message for f in result.findings}


def test_a_result_read_only_in_the_method_goes_global():
    source, findings = _migrate("print(float(out[0].sum()))")
    assert pmap_contract_code(source) == []
    assert "print(float(out.sum()))" in source
    assert "Trainer.run passes global arrays" in findings["PM600"]


@pytest.mark.parametrize("use, reason", [
    ("self.out = out", "stored into a container or attribute"),
    ('state["out"] = out', "stored into a container or attribute"),
    ("self.consume(out)", "passed to `self.consume`"),
])
def test_a_result_leaving_the_method_keeps_the_contract(use, reason):
    source, findings = _migrate(use)
    assert pmap_contract_code(source), source
    assert "PM600" not in findings and reason in findings["PM612"]


def test_a_method_local_that_does_not_qualify_names_its_own_reason():
    """Not the class's "held other than as self.<name>": the local's own blocker (PM602)."""
    source = METHOD.replace("lambda v:", "lambda *v:").replace("v * 2.0 + jax.lax.psum(v, \"i\")",
                                                              "v[0] * 2.0").replace("USE", "")
    result = migrate_source(source.encode(), style="global")
    messages = [f.message for f in result.findings if f.code == "PM612"]
    assert len(messages) == 1 and "*args" in messages[0] and "PM602" in messages[0]
    assert "PM609" not in messages[0]
