"""The equivalence harness catches what it exists to catch: planted faults in migrated
copies are each reported for the right reason, and a correct migration passes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import ROOT
from equivalence.check import CheckOptions, check
from transforms.pipeline import migrate_source

ORIGINAL = '''import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
def step(w, x):
    g = lax.pmean(x * w, "i")
    return w - 0.1 * g, lax.pmax(jnp.sum(x), "i"), jnp.sum(x, axis=0)


def run():
    n = jax.local_device_count()
    w = np.ones((n, 4), np.float32)
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    w1, _, _ = step(w, x)
    w2, m, s = step(w1, x)
    return {"w": np.asarray(w2), "m": np.asarray(m), "s": np.asarray(s)}
'''
MIGRATED = migrate_source(ORIGINAL.encode()).source.decode()

FAULTS = {
    # name: (old text, new text, section that must report it)
    "pmean_to_psum": ("g = lax.pmean(", "g = lax.psum(", "outputs"),
    "extra_collective": (
        "    return w - 0.1 * g,", "    g = lax.pmax(g, \"i\")\n    return w - 0.1 * g,", "collectives"
    ),
    "removed_donation": (", donate_argnums=(0,))", ")", "donation"),
    "dropped_rank_reduction": (
        "over_axes(jax.lax.squeeze,", "over_axes(lambda x, axes: x,", "outputs"
    ),
    "wrong_out_spec": (
        'axis_name="i", donate',
        'axis_name="i", out_specs=(jax.sharding.PartitionSpec("i"),) * 2 '
        "+ (jax.sharding.PartitionSpec(),), donate",
        "outputs",
    ),
}


def write(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prog.py").write_text(text)
    return folder


def check_one(tmp_path, migrated_text, timeout=120.0):
    original = write(tmp_path / "original", ORIGINAL)
    migrated = write(tmp_path / "migrated", migrated_text)
    [report] = check(original, migrated, ["prog:run"], CheckOptions(devices=(8,), timeout=timeout))
    return report


def test_correct_migration_is_equivalent(tmp_path):
    report = check_one(tmp_path, MIGRATED)
    assert report.verdict == "equivalent", report.differences
    assert report.sections["donation"].details["original"] == [1]
    kinds = report.sections["collectives"].details["migrated"]["program_collectives"]
    assert [row["collective"].split()[0] for row in kinds] == ["all-reduce"]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_fault_is_reported_for_the_right_reason(fault, tmp_path):
    old, new, section = FAULTS[fault]
    assert old in MIGRATED, "the fault must apply to the generated code"
    report = check_one(tmp_path, MIGRATED.replace(old, new, 1))
    assert report.verdict == "different"
    assert report.sections[section].verdict == "different", report.differences
    if fault in ("extra_collective", "removed_donation"):
        # These faults leave every value unchanged: only the compiled program shows them.
        assert report.sections["outputs"].verdict == "equivalent"


NO_COLLECTIVES = """import jax
import numpy as np


@jax.pmap
def scale(x):
    return 2.0 * x


def run():
    n = jax.local_device_count()
    y = scale(np.arange(n * 4, dtype=np.float32).reshape(n, 4))
    return {"y": np.asarray(y), "mean": np.asarray(np.mean(y))}
"""


def test_a_host_reduction_of_a_sharded_output_is_a_note_not_a_difference(tmp_path):
    """np.mean(x) calls x.mean(): on the migrated side's output, spread over 8 devices, that
    eager reduction compiles an all-reduce; on the legacy pmap output it ran on one device.
    It is not the program's communication (here the program has none), so it is a note."""
    from conftest import legacy_python_or_skip

    original = write(tmp_path / "original", NO_COLLECTIVES)
    migrated = write(tmp_path / "migrated", migrate_source(NO_COLLECTIVES.encode()).source.decode())
    options = CheckOptions(devices=(8,), reference_python=legacy_python_or_skip())
    [report] = check(original, migrated, ["prog:run"], options)
    assert report.verdict == "equivalent", report.differences
    collectives = report.sections["collectives"]
    assert any("eager reductions" in note for note in collectives.notes), collectives.notes
    assert collectives.details["migrated"]["eager_reduction_collectives"]
    assert not collectives.details["migrated"]["program_collectives"]


def test_migrated_entry_that_raises_is_a_difference(tmp_path):
    broken = MIGRATED.replace("    g = lax.pmean(", "    raise RuntimeError('planted')\n    g = lax.pmean(")
    report = check_one(tmp_path, broken)
    assert report.verdict == "different"
    assert "RuntimeError: planted" in report.migrated["error"]


def test_migrated_entry_that_hangs_times_out(tmp_path):
    hanging = MIGRATED.replace("def run():\n", "def run():\n    import time; time.sleep(600)\n")
    report = check_one(tmp_path, hanging, timeout=15)
    assert report.verdict == "different"
    assert "timed out" in report.migrated["error"]
    assert report.seconds < 60


def test_check_cli_single_path_reports_and_exit_codes(tmp_path):
    root = write(tmp_path / "project", ORIGINAL)
    (root / "bad.py").write_text("def run():\n    raise ValueError('original is broken')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "migrator.cli", "check", str(root), "--devices", "2,8",
               "--report-json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml")]
    good = subprocess.run(command + ["--entry", "prog:run"], capture_output=True, text=True, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["schema_version"] == 3
    assert [(r["entry"], r["devices"], r["verdict"]) for r in document["results"]] == [
        ("prog:run", 2, "equivalent"), ("prog:run", 8, "equivalent")]
    assert {"outputs", "collectives", "donation", "sharding"} <= set(document["results"][0])
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"

    both = subprocess.run(command + ["--entry", "bad:run", "--entry", "prog:run"],
                          capture_output=True, text=True, env=env)
    assert both.returncode == 2, "an original that fails means the check could not be made"
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [r["verdict"] for r in results] == ["error", "error", "equivalent", "equivalent"]
    assert "original is broken" in results[0]["original"]["error"]


@pytest.mark.parametrize("fault", [None, "removed_donation", "extra_collective", "dropped_rank_reduction"])
def test_against_the_legacy_pmap_reference(fault, tmp_path):
    """Original under jax 0.4.38 (legacy pmap), migrated under current JAX."""
    from conftest import legacy_python_or_skip

    text = MIGRATED if fault is None else MIGRATED.replace(*FAULTS[fault][:2], 1)
    original = write(tmp_path / "original", ORIGINAL)
    migrated = write(tmp_path / "migrated", text)
    options = CheckOptions(devices=(8,), reference_python=legacy_python_or_skip())
    [report] = check(original, migrated, ["prog:run"], options)
    assert report.original["jax_version"] == "0.4.38"
    if fault is None:
        assert report.verdict == "equivalent", report.differences
    elif fault == "extra_collective":
        # Across JAX versions only kinds and groups are compared: one more all-reduce of the
        # same group is a note, not a difference (XLA versions combine collectives differently).
        assert report.sections["outputs"].verdict == "equivalent"
        assert any("operands" in note for note in report.sections["collectives"].notes)
    else:
        assert report.sections[FAULTS[fault][2]].verdict == "different", report.differences


PROPERTY_PROGRAM = '''import jax
import numpy as np
from hypothesis import strategies as st
from jax import lax


def body(x):
    return lax.psum(x, "i") * 2 + lax.axis_index("i")


step = jax.pmap(body, axis_name="i")


@st.composite
def _inputs(draw):
    k = draw(st.integers(1, 4))
    values = draw(st.lists(st.integers(-100, 100), min_size=8 * k, max_size=8 * k))
    return (np.array(values, np.float32).reshape(8, k),)


inputs = _inputs()
'''


@pytest.mark.parametrize("planted", [False, True])
def test_property_mode_draws_inputs_and_shrinks_a_difference(planted, tmp_path):
    write(tmp_path / "original", PROPERTY_PROGRAM)
    migrated = migrate_source(PROPERTY_PROGRAM.encode()).source.decode()
    if planted:  # only wrong for inputs above 50: hypothesis must find and shrink one
        migrated = migrated.replace('lax.axis_index("i")', 'lax.axis_index("i") * (x > 50)')
    write(tmp_path / "migrated", migrated)
    completed = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", str(tmp_path / "original"),
         str(tmp_path / "migrated"), "--function", "prog:step", "--inputs", "prog:inputs",
         "--max-examples", "25", "--report-json", str(tmp_path / "p.json")],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    [result] = json.loads((tmp_path / "p.json").read_text())["properties"]
    if not planted:
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert result["verdict"] == "equivalent" and result["examples"] >= 25
    else:
        assert completed.returncode == 1
        assert result["verdict"] == "different"
        # Shrunk: the smallest shape, all zeros.
        assert "shape=(8, 1)" in result["minimal_failure"]["input"]
        assert "values=[0. 0. 0. 0. 0. 0. 0. 0.]" in result["minimal_failure"]["input"]


HOSTILE = '''import os
import sys

import numpy as np


def raises():
    raise KeyError("boom")


def exits():
    sys.exit(3)


def segfaults():
    os.kill(os.getpid(), 11)


def floods():
    sys.stdout.write("x" * 20_000_000)
    sys.stderr.write("y" * 5_000_000)
    return {"a": np.arange(3)}


def not_arrays():
    return {"obj": object(), "n": 3}


def fine():
    return {"a": np.arange(4.0)}
'''


def test_hostile_entries_are_each_reported_and_the_rest_still_run(tmp_path):
    original = write(tmp_path / "original", "")
    (original / "hostile.py").write_text(HOSTILE)
    migrated = write(tmp_path / "migrated", "")
    (migrated / "hostile.py").write_text(HOSTILE.replace('raise KeyError("boom")', "return 1"))
    entries = [f"hostile:{name}" for name in ("raises", "exits", "segfaults", "floods", "not_arrays", "fine")]
    reports = {r.entry.split(":")[1]: r for r in check(original, migrated, entries, CheckOptions(devices=(2,), timeout=60))}
    assert list(reports) == ["raises", "exits", "segfaults", "floods", "not_arrays", "fine"]
    assert reports["raises"].verdict == "error" and "KeyError" in reports["raises"].original["error"]
    assert reports["exits"].verdict == "error" and "SystemExit: 3" in reports["exits"].original["error"]
    assert reports["segfaults"].verdict == "error" and "worker died" in reports["segfaults"].original["error"]
    assert reports["floods"].verdict == "equivalent"
    assert reports["not_arrays"].verdict == "different"
    assert reports["not_arrays"].differences == [
        "outputs: ['obj']: not an array (object / object); cannot be compared"]
    assert reports["fine"].verdict == "equivalent"


DONATING = '''import functools

import jax
from jax import lax


@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
def step(w, x):
    return w - 0.1 * lax.pmean(x * w, "i")
'''
DONATING_INPUTS = '''import numpy as np
from hypothesis import strategies as st

inputs = st.integers(1, 3).map(lambda k: (np.ones((8, k), np.float32), np.ones((8, k), np.float32)))
'''


@pytest.mark.parametrize("reference", ["same", "legacy"])
def test_property_mode_sees_donated_inputs_deleted(reference, tmp_path):
    """Called directly, a donating function deletes its (device-placed) donated input; a
    migration that drops donation is caught even though every value is the same."""
    from conftest import legacy_python_or_skip

    original = write(tmp_path / "original", DONATING)
    (original / "inputs.py").write_text(DONATING_INPUTS)
    migrated_text = migrate_source(DONATING.encode()).source.decode()
    extra = ["--reference-python", legacy_python_or_skip()] if reference == "legacy" else []
    for planted, expected in ((False, 0), (True, 1)):
        text = migrated_text.replace(", donate_argnums=(0,))", ")") if planted else migrated_text
        write(tmp_path / "migrated", text)
        completed = subprocess.run(
            [sys.executable, "-m", "migrator.cli", "check", str(original), str(tmp_path / "migrated"),
             "--function", "prog:step", "--inputs", "inputs:inputs", "--max-examples", "5",
             "--report-json", str(tmp_path / "p.json"), *extra],
            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert completed.returncode == expected, completed.stdout + completed.stderr
        [result] = json.loads((tmp_path / "p.json").read_text())["properties"]
        if planted:
            assert result["minimal_failure"]["differences"] == [
                "donated inputs deleted: original [True, False], migrated [False, False]"]


LOOPED = '''import jax
import numpy as np
from jax import lax


def total(x):
    return lax.psum(x, "i")


def run():
    x = np.ones((jax.local_device_count(), 3), np.float32)
    outs = [jax.pmap(total, "i")(x) for _ in range(4)]  # the pmap is rebuilt every time
    return {"sum": np.asarray(sum(outs))}
'''


def test_rebuilt_site_compiles_once_like_pmap(tmp_path):
    """`jax.pmap(f)(x)` in a loop compiles once with pmap; the migrated helper must share its
    compiled program across calls too (found by the benchmark: it recompiled every time)."""
    from equivalence.runner import run_entry

    write(tmp_path / "migrated", migrate_source(LOOPED.encode()).source.decode())
    outcome = run_entry(tmp_path / "migrated", "prog:run", devices=8)
    assert outcome.ok, outcome.error
    compiled = [m.name for m in outcome.compiled.modules if m.name.endswith("total")]
    assert compiled == ["jit_total"]


TWO_SITES = '''import jax
import numpy as np


def total(x):
    return jax.lax.psum(x, "i")


def shifted_total(x):
    return jax.lax.psum(x + 1.0, "i")


def run():
    x = np.arange(jax.local_device_count(), dtype=np.float32)
    return {"a": np.asarray(jax.pmap(total, "i")(x)),
            "b": np.asarray(jax.pmap(shifted_total, "i")(x))}
'''


def test_two_sites_with_the_same_collectives_against_current_jax(tmp_path):
    """New pmap names every program jit__fun; the check must not count the migrated
    (named) programs twice where the original's merge (found by the program fuzzer)."""
    original = write(tmp_path / "original", TWO_SITES)
    migrated = write(tmp_path / "migrated", migrate_source(TWO_SITES.encode()).source.decode())
    [report] = check(original, migrated, ["prog:run"], CheckOptions(devices=(8,)))
    assert report.verdict == "equivalent", report.differences


DUPLICATE_PSUMS = '''
import jax
import jax.numpy as jnp
import numpy as np


def twice(x):
    return jax.lax.psum(jnp.sum(x), "i"), jax.lax.psum(jnp.sum(x), "i")


def run():
    x = jnp.arange(jax.local_device_count() * 4.0).reshape(-1, 4)
    return {"a": np.asarray(jax.pmap(twice, "i")(x))}
'''


def test_legacy_pmap_lowering_against_old_target_counts_are_notes(tmp_path):
    """Both sides under jax 0.4.38: its XLA merges the legacy pmap's two identical psums
    (replica collectives) but not the shard_map's (channel collectives). Found by the program
    fuzzer's old-target sweep: a note, not a difference; kinds must still match."""
    from conftest import legacy_python_or_skip
    from transforms.target import TargetJax

    python = legacy_python_or_skip()
    original = write(tmp_path / "original", DUPLICATE_PSUMS)
    source = migrate_source(DUPLICATE_PSUMS.encode(), TargetJax.parse("0.4.38")).source.decode()
    migrated = write(tmp_path / "migrated", source)
    options = CheckOptions(devices=(8,), reference_python=python, python=python)
    [report] = check(original, migrated, ["prog:run"], options)
    assert report.verdict == "equivalent", report.differences
    assert any("legacy pmap vs jit lowering" in n for n in report.sections["collectives"].notes)


SLEEPER = '''\
import time

import jax
import numpy as np


def run():
    time.sleep(600)
    return np.zeros(2)
'''


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live (not zombie) process."""
    table = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (proc / "stat").read_text().split(")")[-1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(proc.name)] = (int(fields[1]), cmdline)
    return table


def _processes_naming(marker: str, harness: int | None = None) -> list[int]:
    """Pids of running harness workers: those whose command line names `marker` (a fresh
    worker), not this process, not the CLI that names the entry too; and with `harness`, the
    runs forked by that harness's warm workers (equivalence/warm_workers.py), whose command
    line is their warm worker's."""
    table = _process_table()
    warm = {pid for pid, (parent, cmdline) in table.items()
            if "worker.py --serve" in cmdline and parent == harness}
    return [pid for pid, (parent, cmdline) in table.items()
            if pid != os.getpid() and (
                (marker in cmdline and "worker.py" in cmdline and "--serve" not in cmdline)
                or parent in warm)]


def _alive(pids) -> list[int]:
    table = _process_table()
    return [pid for pid in pids if pid in table]


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "two-processes"])
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_a_stopped_check_leaves_no_worker_behind(tmp_path, signal_number, processes):
    """The workers run in their own session, out of reach of the signals that stop `check`:
    stopped with SIGTERM, check kills them before it unwinds; killed with SIGKILL, each worker
    sees its parent gone (worker.exit_with_parent) and ends itself and its group."""
    module = f"sleeper_{signal_number}_{processes}_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(SLEEPER)
    cli = subprocess.Popen(
        [sys.executable, "-m", "migrator.cli", "check", str(tmp_path), "--entry", f"{module}:run",
         "--devices", "2", "--processes", str(processes)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # Every worker of both sides (the original and the migrated copy): a fresh one names
        # the entry, a warm worker's run is its child.
        assert _wait_for(
            lambda: len(_processes_naming(f"{module}:run", cli.pid)) >= 2 * processes, 120)
        seen = _processes_naming(f"{module}:run", cli.pid)
        cli.send_signal(signal_number)
        cli.wait(timeout=60)
        assert _wait_for(lambda: not _alive(seen) and not _processes_naming(f"{module}:run"),
                         15), _alive(seen)
    finally:
        if cli.poll() is None:
            cli.kill()
        for pid in _processes_naming(f"{module}:run", cli.pid):
            os.kill(pid, signal.SIGKILL)


def test_an_interrupted_pool_kills_its_running_worker_and_starts_no_queued_one(tmp_path):
    """With one thread, the second run waits in the queue while the first sleeps; an
    interruption inside `worker_threads` kills the first and drops the second (a plain
    ThreadPoolExecutor's exit would have started it and waited 600 s for it)."""
    from equivalence.runner import run_entry, start_worker, worker_ended, worker_threads

    module = f"queued_sleeper_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(SLEEPER)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with worker_threads(1) as pool:
            running = pool.submit(run_entry, tmp_path, f"{module}:run", devices=1)
            queued = pool.submit(run_entry, tmp_path, f"{module}:run", devices=1)
            assert _wait_for(
                lambda: len(_processes_naming(f"{module}:run", os.getpid())) == 1, 60)
            seen = _processes_naming(f"{module}:run", os.getpid())
            raise KeyboardInterrupt
    assert time.monotonic() - started < 60
    assert queued.cancelled() and running.done()
    # Killed by the stop, or (a warm worker killed between its fork and its answer) by the
    # run's own watch of its parent within a poll.
    assert _wait_for(lambda: not _alive(seen), 10), _alive(seen)
    assert not _processes_naming(f"{module}:run", os.getpid())
    # The stop is over once the pool has joined: workers start again.
    process = start_worker([sys.executable, "-c", "pass"])
    assert process.wait(timeout=30) == 0
    worker_ended(process.pid)
