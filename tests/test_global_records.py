"""Records whose fields differ in layout (transforms/global_view/records.py), as properties
of the analysis: `.replace(f=v)` gives each field its own layout, `x.f` reads one, and a
method of the module's own class, called on an instance a constructor made, is followed. A record
given to a step named in its function gets a spec per field (record_specs.py). The fixture
pairs tests/fixtures_global/fallback_record_*, record_* and producer_record_method_replicates
show whole rewrites and run them."""

from __future__ import annotations

from site_findings_view import with_named_blockers
from transforms.pipeline import migrate_source

_STATE = '''import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["w", "key"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class State:
    w: Any
    key: Any

    def replace(self, **updates):
        return dataclasses.replace(self, **updates)

    def replicate(self):
        return jax.device_put_replicated(self, jax.local_devices())


def evaluate(w, x):
    return jax.lax.pmean(jnp.sum(x @ w), "batch")


def train_step(state, x):
    grad = jax.lax.pmean(jnp.mean(x, axis=0), "batch")
    return state.replace(w=state.w - 0.1 * grad)


def run():
    n = jax.local_device_count()
    x = np.ones((n, 2, 3), np.float32)
{body}
'''


def _findings(body: str):
    result = migrate_source(_STATE.format(body=body).encode(), style="global")
    return result, {(f.code, f.message) for f in with_named_blockers(result.findings)}


def _messages(findings, code: str) -> list[str]:
    return [message for found, message in findings if found == code]


def test_a_record_reaching_a_step_names_the_field_that_differs_and_its_line():
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    state = jax.pmap(train_step, "batch")(state, x)
    return np.asarray(state.w)''')
    (message,) = _messages(findings, "PM604")
    assert message == ("argument 0 of the pmap at line 38 (`state`) has fields of mixed layout "
                       "(`key` per-device, set at line 37; the others replicated): only a step "
                       "built as `name = jax.pmap(f, ...)` in a function gets specs per field")


def test_a_field_the_record_did_not_replace_keeps_the_records_layout():
    """The keys replaced by per-device ones make a record; its `w` is still replicated, so a
    step given `state.w` goes global (P()), and the method's replicate is rewritten."""
    result, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    return np.asarray(jax.pmap(evaluate, "batch")(state.w, x))''')
    (message,) = _messages(findings, "PM600")
    assert "in_specs (P(), " in message
    assert "jax.device_put_replicated(self" not in result.source.decode()


def test_replacing_the_per_device_field_by_a_replicated_value_gives_a_replicated_tree():
    """`.replace(key=replicated)` of that record: every field replicated again, so the step
    that takes the whole state goes global."""
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    state = state.replace(key=jax.device_put_replicated(jax.random.PRNGKey(2),
                                                        jax.local_devices()))
    state = jax.pmap(train_step, "batch")(state, x)
    return np.asarray(jax.tree_util.tree_map(lambda a: a[0], state).w)''')
    assert not _messages(findings, "PM604")
    assert _messages(findings, "PM600")


def test_a_field_of_unknown_layout_is_named_with_its_line():
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = dataclasses.replace(state, w=np.asarray(jnp.ones((3, 3))))
    state = jax.pmap(train_step, "batch")(state, x)
    return np.asarray(state.w)''')
    (message,) = _messages(findings, "PM604")
    assert "its field `w` (a plain value, set at line 37) has no layout the analysis knows" \
        in message


def test_a_method_is_followed_only_on_an_instance_a_constructor_made():
    """The same `.replicate()` on a value the analysis cannot tie to the module's class (a
    parameter) is not followed: its result is unknown, as before."""
    source = _STATE.format(body='''    return np.asarray(jax.pmap(train_step, "batch")(make(), x).w)


def make(state=None):
    state = state.replicate()
    return state''')
    findings = with_named_blockers(migrate_source(source.encode(), style="global").findings)
    assert not any(f.code == "PM600" for f in findings)
    assert any(f.code == "PM604" and "has no known layout" in f.message
               for f in findings)


def test_a_method_rewritten_for_one_call_is_not_followed_when_read_elsewhere():
    """Following `replicate()` rewrites its body for this call's values: with another read of
    `.replicate` in the module, which would run the rewritten body too, it stays as it is."""
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    again = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate
    state = jax.pmap(train_step, "batch")(state, x)
    return np.asarray(jax.tree_util.tree_map(lambda a: a[0], state).w), again''')
    assert any("`State.replicate` would be rewritten" in m for _, m in findings)


def test_a_named_step_gets_a_spec_per_field_and_gives_the_record_back_with_it():
    """The same record given to `step = jax.pmap(...)`: its spec is built from the argument in
    the step's jitted def, P() on every leaf and P(axis) on `key`, and is the out_specs of the
    state the body gives back; the body squeezes `key` on entry and expands it at the return."""
    result, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    step = jax.pmap(keyed_step, "batch")
    state = step(state, x)
    return np.asarray(state.w)


def keyed_step(state, x):
    key, next_key = jax.random.split(state.key)
    grad = jax.lax.pmean(jnp.mean(x, axis=0) + 0 * jax.random.normal(key, ()), "batch")
    return state.replace(w=state.w - 0.1 * grad, key=next_key)''')
    (message,) = _messages(findings, "PM600")
    assert message.startswith('went global: in_specs (state: P() but key=P("batch"), P()), '
                              'out_specs state\'s specs')
    text = result.source.decode()
    assert 'state_spec = jax.tree.map(lambda _: P(), state).replace(key=P("batch"))' in text
    assert "in_specs=(state_spec, P()),\n            out_specs=state_spec," in text
    assert "state = state.replace(key=jax.tree.map(lambda y: jnp.squeeze(y, 0), state.key))" \
        in text
    assert "key=jax.tree.map(lambda y: jnp.expand_dims(y, 0), next_key)\n" in text


def test_a_field_the_body_makes_per_device_keeps_the_whole_record_stacked():
    """`w` comes in replicated but the body gives it back per-device: the record does not
    leave with the spec it came in with, so it gets no spec per field; the step takes the
    whole state in pmap's stacked layout instead (PM611 names why)."""
    result, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    step = jax.pmap(local_step, "batch")
    for _ in range(2):
        state = step(state, x)
    return np.asarray(state.w)


def local_step(state, x):
    return state.replace(w=state.w - 0.1 * jax.lax.axis_index("batch"), key=state.key)''')
    (message,) = _messages(findings, "PM600")
    assert message.startswith('went global: in_specs (P("batch"), P()), out_specs P("batch")')
    assert "state_spec" not in result.source.decode()
    assert any("argument 0 of `step` (`state`) keeps its device axis" in m
               for m in _messages(findings, "PM611"))


def test_a_methods_keywords_passed_on_to_replace_set_those_fields():
    """flax's `apply_gradients(self, *, grads, **kwargs)` returns `self.replace(...,
    **kwargs)`: the call's extra keyword `key=next_key` sets `key`, per-device, and every
    other field comes from replicated values, so the state goes back with its spec (the
    returned name rebuilt with `key` expanded)."""
    source = _STATE.format(body='''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    step = jax.pmap(keyed_step, "batch")
    for _ in range(2):
        state = step(state, x)
    return np.asarray(state.w)


def keyed_step(state, x):
    key, next_key = jax.random.split(state.key)
    grad = jax.lax.pmean(jnp.mean(x, axis=0) + 0 * jax.random.normal(key, ()), "batch")
    new_state = state.apply(grad=grad, key=next_key)
    return new_state''').replace('''    def replicate(self):''', '''    def apply(self, *, grad, **changes):
        return self.replace(w=self.w - 0.1 * grad, **changes)

    def replicate(self):''')
    result = migrate_source(source.encode(), style="global")
    findings = with_named_blockers(result.findings)
    assert [f.code for f in findings if f.code.startswith("PM6")] == ["PM600"]
    assert "return new_state.replace(key=jax.tree.map(lambda y: jnp.expand_dims(y, 0), " \
        "new_state.key))" in result.source.decode()
    # `changes` bound again in the method: which fields it sets is not followed, so the
    # state gets no spec per field (it is taken whole, in pmap's stacked layout)
    rebound = source.replace("        return self.replace(w=self.w - 0.1 * grad, **changes)",
                             "        changes = dict(changes)\n"
                             "        return self.replace(w=self.w - 0.1 * grad, **changes)")
    assert "state_spec" not in migrate_source(rebound.encode(), style="global").source.decode()


def test_a_caller_that_fails_with_specs_per_field_is_analysed_again_without_them():
    """The step donates the state and is also given `state.w`: with specs per field the
    caller fails (PM610, the donated buffers handed twice). Analysed again without them, the
    record's step alone keeps the contract, its finding says where the specs failed, and the
    caller's other step still goes global."""
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    step = jax.pmap(keyed_step, "batch", donate_argnums=(0,))
    other = jax.pmap(evaluate, "batch")
    state = step(state, state.w)
    return np.asarray(other(state.w, x))


def keyed_step(state, x):
    key, next_key = jax.random.split(state.key)
    grad = jax.lax.pmean(jnp.mean(x, axis=0) + 0 * jax.random.normal(key, ()), "batch")
    return state.replace(w=state.w - 0.1 * grad, key=next_key)''')
    assert _messages(findings, "PM604") == [
        "argument 0 of `step` (`state`), a record (`key` per-device; the others replicated): "
        "its specs per field fail (PM610, line 40)"]
    (message,) = _messages(findings, "PM600")
    assert message.startswith('went global: in_specs (P("batch"), P()), out_specs P()')


def test_a_record_mapped_with_in_axes_none_keeps_the_contract_and_says_so():
    """in_axes None hands every device the whole record, per-device keys included: no spec per
    field fits, and the finding names the field, its line and the in_axes."""
    _, findings = _findings('''    state = State(w=jnp.ones((3, 3)), key=jax.random.PRNGKey(0)).replicate()
    state = state.replace(key=jax.random.split(jax.random.PRNGKey(1), n))
    step = jax.pmap(train_step, "batch", in_axes=(None, 0))
    state = step(state, x)
    return np.asarray(state.w)''')
    assert _messages(findings, "PM604") == [
        "argument 0 of `step` (`state`) has fields of mixed layout (`key` per-device, set at "
        "line 37; the others replicated): its in_axes is None, not 0"]
    assert not _messages(findings, "PM600")
