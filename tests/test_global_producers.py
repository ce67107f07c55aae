"""Producers of per-device batches in the global style, as properties of the rewrite (the
fixture pairs in tests/fixtures_global show the rewrites themselves and run them)."""

from __future__ import annotations

from pathlib import Path

from transforms.pipeline import migrate_source

_SHAPE_OF_A_BATCH = b'''import jax
import jax.numpy as jnp
import numpy as np


def step(x):
    return jax.lax.psum(jnp.sum(x), "i")


p_step = jax.pmap(step, axis_name="i")


def run():
    n = jax.local_device_count()
    rows = np.arange(n * 12, dtype=np.float32)
    batch = rows.reshape((n, -1, 3))
    again = rows.reshape(n, -1, *batch.shape[2:])
    return np.asarray(p_step(batch)), np.asarray(p_step(again))
'''


def test_a_reshape_whose_shape_reads_a_batch_is_not_merged():
    """`*batch.shape[2:]` of a merged batch is `()`, not the original `(3,)`: merging `again`
    by rewriting its reshape would change its rows, so it is left as written."""
    result = migrate_source(_SHAPE_OF_A_BATCH, style="global")
    text = result.source.decode()
    assert "rows.reshape(n, -1, *batch.shape[2:])" in text
    assert "rows.reshape(-1, *batch.shape[2:])" not in text


def test_the_starred_rest_of_a_plain_shape_merges():
    source = _SHAPE_OF_A_BATCH.replace(b"*batch.shape[2:]", b"*rows.reshape(1, -1, 3).shape[2:]")
    text = migrate_source(source, style="global").source.decode()
    assert "rows.reshape(-1, *rows.reshape(1, -1, 3).shape[2:])" in text
    assert "rows.reshape((-1, 3))" in text


def test_the_output_does_not_depend_on_string_hashing():
    """Where paths join, the analysis reads the names in order: with several conflicts the one
    raised first, and so the fallback and the output, were once chosen by the hash seed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    program = Path(__file__).parent / "data" / "hash_order_join.py"
    code = ("import sys, hashlib; from transforms.pipeline import migrate_source; "
            "print(hashlib.sha256(migrate_source(open(sys.argv[1], 'rb').read(), "
            "style='global').source).hexdigest())")
    root = str(Path(__file__).resolve().parent.parent)
    digests = {subprocess.run([sys.executable, "-c", code, str(program)], check=True,
                              capture_output=True, text=True, cwd=root,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
               for seed in range(1, 5)}
    assert len(digests) == 1


def test_programs_that_crashed_the_global_analysis_migrate():
    """Two programs the statement-interpreter move's differential run found crashing the
    analysis (nested trys in the donation check; a stacked value whose producer reads itself)
    now migrate, and a second run changes nothing."""
    from pathlib import Path

    for name in ("nested_try_donation.py", "stacked_reason_cycle.py"):
        source = (Path(__file__).parent / "data" / name).read_bytes()
        once = migrate_source(source, style="global")
        assert once.changed, name
        assert migrate_source(once.source, style="global").source == once.source, name


_DEFAULTED_DEVICES = b'''import jax
import jax.numpy as jnp
import numpy as np


def device_order():
    return jax.local_devices()


def replicate(tree, devices=None):
    BODY
    return jax.device_put_replicated(tree, devices)


p_step = jax.pmap(lambda w: jax.lax.psum(w, "i"), axis_name="i")


def run():
    return np.asarray(p_step(replicate(jnp.ones(3))))
'''


def _replicated_globally(body: str) -> bool:
    source = _DEFAULTED_DEVICES.replace(b"BODY", body.encode())
    result = migrate_source(source, style="global")
    return any(f.code == "PM600" for f in result.findings)


def test_a_parameter_left_to_none_takes_the_or_default():
    """`devices = devices or device_order()`: the call leaves `devices` None, so it is the
    device list the shared helper returns (followed although others may call it)."""
    assert _replicated_globally("devices = devices or device_order()")
    assert _replicated_globally("devices = devices or jax.local_devices()")


def test_a_parameter_bound_before_the_or_is_not_taken_for_none():
    assert not _replicated_globally(
        "devices = jax.local_devices()[:1]\n    devices = devices or device_order()")
    assert not _replicated_globally(
        "for _ in range(2):\n        devices = devices or jax.local_devices()")


def test_a_column_of_arange_is_already_the_merged_batch():
    """`np.arange(n).reshape(n, 1)` (one row per device) merges to `np.arange(n)`; the
    analysis used to crash on it (a count with no second factor)."""
    source = b'''import jax
import numpy as np


@jax.pmap
def step(x):
    return x * 2.0


def run():
    n = jax.local_device_count()
    return np.asarray(step(np.arange(n, dtype=np.float32).reshape(n, 1)))
'''
    text = migrate_source(source, style="global").source.decode()
    assert "step(np.arange(n, dtype=np.float32))" in text


_NAMED_REPLICATE = b'''import jax
import numpy as np


@jax.pmap
def step(w, x):
    return w * x


def run():
    n = jax.local_device_count()
    w = np.ones((3,), np.float32)
    replicate = lambda x: np.broadcast_to(x, (n,) + x.shape)
    ws = jax.tree_util.tree_map(replicate, w)
    return step(ws, np.ones((n, 3), np.float32))
'''


def _codes(source: bytes) -> list[str]:
    return [f.code for f in migrate_source(source, style="global").findings]


def test_a_lambda_bound_to_a_name_and_used_once_is_read_in_place():
    text = migrate_source(_NAMED_REPLICATE, style="global").source.decode()
    assert "PM600" in _codes(_NAMED_REPLICATE)
    assert "replicate = lambda" not in text  # the binding, now unread, is gone
    assert "ws = w\n" in text


def test_a_named_function_used_twice_is_not_read_in_place():
    """Its body would be edited for one use and run for the other: left as written."""
    source = _NAMED_REPLICATE.replace(b"    return step(", b"    replicate(w)\n    return step(")
    assert "PM600" not in _codes(source)
    assert b"replicate = lambda" in migrate_source(source, style="global").source


def test_a_named_function_bound_twice_is_not_read_in_place():
    source = _NAMED_REPLICATE.replace(
        b"    ws = ", b"    if n > 8:\n        replicate = lambda x: x\n    ws = ")
    assert "PM600" not in _codes(source)


def test_a_named_def_reading_row_zero_is_a_consumer():
    source = _NAMED_REPLICATE.replace(
        b"    return step(ws, np.ones((n, 3), np.float32))\n",
        b"    out = step(ws, np.ones((n, 3), np.float32))\n\n"
        b"    def first(x):\n        return x[0]\n\n"
        b"    return jax.tree_util.tree_map(first, out)\n")
    text = migrate_source(source, style="global").source.decode()
    assert "PM600" in _codes(source)
    assert "def first" not in text and "    return out\n" in text
    assert "\n\n\n" not in text.split("def run():")[1]  # no run of blank lines left


def test_an_array_of_a_list_of_n_copies_is_a_replicated_stack():
    """`np.array([x] * n)` stacks n equal rows, as `np.stack([x] * n)` does; the migrated
    value stays an array (`np.asarray(x)`), not the list element."""
    source = _NAMED_REPLICATE.replace(
        b"    replicate = lambda x: np.broadcast_to(x, (n,) + x.shape)\n"
        b"    ws = jax.tree_util.tree_map(replicate, w)\n",
        b"    ws = np.array([w] * n)\n")
    text = migrate_source(source, style="global").source.decode()
    assert "PM600" in _codes(source) and "ws = np.asarray(w)\n" in text


_TOP_LEVEL_SPLIT = b'''import jax
import numpy as np


@jax.pmap
def step(x):
    return x * 2


n_devices = jax.local_device_count()


def split(array):
    return array.reshape(n_devices, array.shape[0] // n_devices, *array.shape[1:])


xs = np.ones((n_devices * 4, 3), np.float32)
out = np.asarray(step(split(xs)))
'''


def test_a_helper_top_level_code_calls_reads_its_globals_as_they_are_there():
    """`split` reads the module's `n_devices`, the device count where top-level code calls
    it: the reshape is a per-device batch, merged in the helper."""
    text = migrate_source(_TOP_LEVEL_SPLIT, style="global").source.decode()
    assert "PM600" in _codes(_TOP_LEVEL_SPLIT)
    assert "array.reshape(n_devices * (array.shape[0] // n_devices), *array.shape[1:])" in text


_CAPPED = (Path(__file__).resolve().parent / "fixtures_global" / "caller_none_default_never_passed"
           / "before.py").read_bytes()


def codes(source: bytes) -> list[str]:
    return [f.code for f in migrate_source(source, style="global").findings]


def test_a_none_default_is_known_only_where_no_call_passes_it():
    """`if max_devices_per_host:` is dead where every call leaves the parameter None; a call
    passing it, a call spreading **kwargs, or the function used as a value make the capped
    count possible, and the step keeps pmap's contract."""
    assert "PM600" in codes(_CAPPED)
    for change in (b'"params": np.asarray(train(3, max_devices_per_host=2))',
                   b'"params": np.asarray(train(3, **{}))',
                   b'"params": np.asarray(train(3)), "f": train'):
        changed = _CAPPED.replace(b'"params": np.asarray(train(3))', change)
        assert changed != _CAPPED
        assert "PM600" not in codes(changed) and "PM612" in codes(changed), change


def test_a_slice_of_the_device_list_is_all_devices_only_up_to_the_device_count():
    source = _CAPPED.replace(b"jax.local_devices()[:local_devices_to_use]",
                             b"jax.local_devices()[:local_devices_to_use - 1]")
    assert "PM600" not in codes(source)


_TWO_LOADERS = (Path(__file__).resolve().parent / "fixtures_global" / "helper_shared_by_two_loaders"
                / "before.py").read_bytes()


def test_a_helper_rewritten_for_two_loaders_is_refused_where_another_use_would_see_it():
    """`shard` serves the train and the eval loader with one rewrite; a use the training
    function's analysis does not follow (a table of helpers, a call from an unrelated
    function) would see the rewritten helper, so then both steps keep pmap's contract."""
    assert codes(_TWO_LOADERS).count("PM600") == 2
    for extra in (b"\nHELPERS = [shard]\n",
                  b"\ndef debug(data):\n    return shard(data)\n"):
        text = migrate_source(_TWO_LOADERS + extra, style="global").source.decode()
        assert "x.reshape((jax.local_device_count(), -1) + x.shape[1:])" in text, extra
