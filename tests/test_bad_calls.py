"""A migrated function called wrongly fails as legacy pmap did: same exception type, a message
that names the problem as pmap's own does (the same text where pmap's is plain), and what
pmap accepted (arrays committed to other devices) still works.

Each case runs under jax 0.4.38 with the real jax.pmap, and with `_pmap_compat` (which
translates in_axes as the tool does, then calls `_pmap_style_shard_map`): imported from the
templates on current JAX, and as the text written for an old target on jax 0.4.38.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, legacy_python_or_skip
from transforms.helpers.helper_templates import helper_text
from transforms.target import TargetJax

_CASES = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np

mode = sys.argv[1]
if mode == "pmap":
    pmap = jax.pmap
    put_sharded = jax.device_put_sharded
else:
    if mode == "import":
        from transforms.templates.pmap_compat import _pmap_compat
        from transforms.templates.device_put_sharded import _device_put_sharded
    else:
        exec(sys.stdin.read())
    pmap, put_sharded = _pmap_compat, _device_put_sharded
d = jax.devices()
x = np.ones((8, 3), np.float32)
y4 = np.ones((4, 3), np.float32)
shards = list(np.arange(12, dtype=np.float32).reshape(4, 3))
cases = {
    "prefix_too_long": lambda: pmap(lambda a: a, "i", in_axes=(0, 0))(x),
    "prefix_too_short": lambda: pmap(lambda a, b: a, "i", in_axes=(0,))(x, x),
    "prefix_other_keys": lambda: pmap(lambda a: a, "i", in_axes=({"k": 0},))({"j": x}),
    "kwarg_without_the_axis": lambda: pmap(lambda a, k: a * k, "i")(x, k=2.0),
    "kwarg_of_another_size": lambda: pmap(lambda a, k: a * k, "i")(x, k=y4),
    "sizes_differ": lambda: pmap(lambda a, b: a + b, "i")(x, y4),
    "sizes_differ_in_a_tree": lambda: pmap(lambda t: t["u"], "i")({"u": x, "v": y4}),
    "more_than_the_devices": lambda: pmap(lambda a: a, "i")(np.ones((16, 3), np.float32)),
    "no_devices": lambda: pmap(lambda a: a, "i", devices=[])(x),
    "fewer_devices_than_the_axis": lambda: pmap(lambda a: a, "i", devices=d[:4])(x),
    "axis_out_of_range": lambda: pmap(lambda a: a, "i", in_axes=2)(x),
    "scalar_argument": lambda: pmap(lambda a: a, "i")(3.0),
    # pmap moved arrays committed to other devices onto its own; so must the migration.
    "committed_to_other_devices": lambda: pmap(lambda a: a + 1, "i")(put_sharded(shards, d[4:])),
    "committed_in_reverse": lambda: pmap(lambda a: a * jax.lax.axis_index("i"), "i")(
        put_sharded(shards, d[:4][::-1])),
    "committed_to_one_device": lambda: pmap(lambda a, b: a + b, "i", in_axes=(0, None))(
        x, jax.device_put(np.ones(3, np.float32), d[5])),
    "devices_given_and_committed_elsewhere": lambda: pmap(lambda a: a + 1, "i", devices=d[:4])(
        put_sharded(shards, d[4:])),
}
out = {}
for name, case in cases.items():
    try:
        out[name] = {"ok": np.asarray(case()).tolist()}
    except Exception as error:
        out[name] = {"type": type(error).__name__, "message": str(error).split("\n----")[0]}
print(json.dumps(out))
"""


def _run(python: str, mode: str, stdin: str = "") -> dict:
    done = subprocess.run(
        [python, "-c", _CASES, mode], input=stdin, capture_output=True, text=True, timeout=300,
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def legacy_pmap() -> dict:
    return _run(legacy_python_or_skip(), "pmap")


@pytest.fixture(scope="module", params=["current jax", "jax 0.4.38"])
def migrated(request) -> dict:
    if request.param == "current jax":
        return _run(sys.executable, "import")
    text = "".join(helper_text(name, TargetJax.parse("0.4.38")) for name in (
        "_pmap_style_shard_map", "_pmap_compat", "_device_put_sharded"))
    return _run(legacy_python_or_skip(), "text", text)


SAME_MESSAGE = [
    "kwarg_without_the_axis", "kwarg_of_another_size", "sizes_differ", "sizes_differ_in_a_tree",
    "more_than_the_devices", "no_devices", "axis_out_of_range", "scalar_argument",
]


@pytest.mark.parametrize("case", SAME_MESSAGE)
def test_plain_messages_are_pmaps_word_for_word(legacy_pmap, migrated, case):
    assert migrated[case] == legacy_pmap[case]
    assert legacy_pmap[case]["type"] == "ValueError"


def test_a_device_list_shorter_than_the_axis_is_refused_as_pmap_refuses_it(legacy_pmap, migrated):
    case = "fewer_devices_than_the_axis"
    first_line = lambda r: r["message"].splitlines()[0]
    assert migrated[case]["type"] == legacy_pmap[case]["type"] == "ValueError"
    assert first_line(migrated[case]) == first_line(legacy_pmap[case])
    assert "Got axis_size=8, num_local_devices=4." in first_line(migrated[case])


@pytest.mark.parametrize("case", ["prefix_too_long", "prefix_too_short", "prefix_other_keys"])
def test_an_in_axes_that_is_no_prefix_of_the_arguments_says_so(legacy_pmap, migrated, case):
    theirs, ours = legacy_pmap[case], migrated[case]
    assert ours["type"] == theirs["type"] == "ValueError"
    # What to fix, in pmap's words, then the specs and the difference the tree functions found.
    rule = "tree prefix of the tuple of arguments passed positionally to the pmapped function"
    assert rule in theirs["message"]
    assert ours["message"].startswith(f"in_specs (pmap's in_axes) must be a {rule}, but in_specs=")


@pytest.mark.parametrize("case", [
    "committed_to_other_devices", "committed_in_reverse", "committed_to_one_device",
    "devices_given_and_committed_elsewhere",
])
def test_arrays_committed_to_other_devices_are_moved_as_pmap_moved_them(legacy_pmap, migrated, case):
    assert "ok" in legacy_pmap[case], legacy_pmap[case]
    assert migrated[case] == legacy_pmap[case]
