"""`check --processes 2`: planted faults that only show with several processes are caught, a
process that raises, dies or hangs on either side is reported (exit 1 or 2, never a hang),
nothing is left running, and two checks can run at once.

Each side runs as a real 2-process jax.distributed job (gloo) on localhost; the original under
the legacy jax 0.4.38 pmap. Slow-marked (a few minutes): `.ci/run` runs it with `-m slow`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, legacy_python_or_skip, link_flax_or_skip

from equivalence.multiprocess import run_entry_processes
from transforms.pipeline import migrate_source

pytestmark = pytest.mark.slow

PROGRAM = b'''\
import jax
import numpy as np

step = jax.pmap(lambda x: jax.lax.psum(x, "i") + jax.lax.axis_index("i"), "i")


def run():
    n = jax.local_device_count()
    x = np.arange(n, dtype=np.float32) + n * jax.process_index()
    return {"out": step(x), "process": np.asarray(jax.process_index())}
'''
# Planted into the migrated multi-process helper (transforms/templates/pmap_style_shard_map.py):
LOCAL_MESH = (  # the mesh is this process's devices only: collectives stop at the host
    "found = [d for p in range(processes) for d in jax.local_devices(p, backend)]",
    "found = jax.local_devices(backend=backend)",
)
GLOBAL_READ = (  # the caller gets the global output instead of its host-local rows
    "return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)",
    "return out",
)
FAIL_ON_PROCESS_1 = {
    "raises": "    if jax.process_index() == 1:\n        raise RuntimeError('planted')\n",
    "dies": "    if jax.process_index() == 1:\n        import os; os._exit(7)\n",
    "hangs": "    if jax.process_index() == 1:\n        import time; time.sleep(600)\n",
}


def with_failure(source: bytes, how: str) -> bytes:
    return source.replace(b"    n = jax.local_device_count()\n",
                          FAIL_ON_PROCESS_1[how].encode() + b"    n = jax.local_device_count()\n")


def planted(source: bytes, fault: tuple[str, str]) -> bytes:
    assert fault[0].encode() in source
    return source.replace(fault[0].encode(), fault[1].encode())


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """orig/ and migrated/ with one module per scenario."""
    root = tmp_path_factory.mktemp("multiprocess_check")
    migrated = migrate_source(PROGRAM + b"hosts = jax.process_count\n").source
    original = PROGRAM + b"hosts = jax.process_count\n"
    modules = {
        "honest": (original, migrated),
        "local_mesh": (original, planted(migrated, LOCAL_MESH)),
        "global_read": (original, planted(migrated, GLOBAL_READ)),
        "original_raises": (with_failure(original, "raises"), migrated),
        "migrated_dies": (original, with_failure(migrated, "dies")),
        "migrated_hangs": (original, with_failure(migrated, "hangs")),
    }
    for side in ("orig", "migrated"):
        (root / side).mkdir()
    for name, (before, after) in modules.items():
        (root / "orig" / f"{name}.py").write_bytes(before)
        (root / "migrated" / f"{name}.py").write_bytes(after)
    return root


def check(root: Path, names, processes: int, devices: int = 4, timeout: float = 60, extra=()):
    report, junit = root / f"report{processes}.json", root / f"report{processes}.xml"
    command = [
        sys.executable, "-m", "migrator.cli", "check", str(root / "orig"), str(root / "migrated"),
        *extra, *[f"--entry={name}:run" for name in names], f"--devices={devices}",
        f"--processes={processes}", f"--reference-python={legacy_python_or_skip()}",
        f"--timeout={timeout}", f"--report-json={report}", f"--junit={junit}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=timeout * 2 * len(names) + 120)
    results = json.loads(report.read_text())["results"]
    verdicts = {(r["entry"].split(":")[0], r.get("process", 0)): r for r in results}
    return completed, verdicts, ET.parse(junit).getroot()


def alive_under(path: Path) -> list[str]:
    """Command lines of running processes that mention `path` (workers name their root)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline and proc.name.isdigit() and int(proc.name) != os.getpid():
            found.append(cmdline)
    return found


def test_faults_failures_and_hangs_at_two_processes(trees):
    names = ["honest", "local_mesh", "global_read", "original_raises", "migrated_dies",
             "migrated_hangs"]
    completed, results, junit = check(trees, names, processes=2, timeout=45)
    assert completed.returncode == 2, completed.stderr  # the original failed: could not check
    verdict = {key: r["verdict"] for key, r in results.items()}
    assert verdict[("honest", 0)] == verdict[("honest", 1)] == "equivalent"
    # Local devices only: psum and axis_index stop at the host, on both processes.
    for process in (0, 1):
        local = results[("local_mesh", process)]
        assert local["verdict"] == "different"
        assert local["outputs"]["verdict"] == "different"
        assert local["collectives"]["verdict"] == "different"
    # The global output read where pmap gave host-local rows.
    for process in (0, 1):
        assert results[("global_read", process)]["outputs"]["verdict"] == "different"
    # Failures name the process; the others are reported as stopped because of it.
    assert verdict[("original_raises", 1)] == "error"
    assert "process 1 of 2: RuntimeError: planted" in results[("original_raises", 1)]["original"]["error"]
    assert "stopped: process 1 failed" in results[("original_raises", 0)]["original"]["error"]
    assert verdict[("migrated_dies", 1)] == "different"
    assert "process 1 of 2 died (exit 7)" in results[("migrated_dies", 1)]["migrated"]["error"]
    assert verdict[("migrated_hangs", 1)] == "different"
    assert "process 1 of 2 timed out after 45 s" in results[("migrated_hangs", 1)]["migrated"]["error"]
    names_in_junit = {case.get("name") for case in junit.iter("testcase")}
    assert "local_mesh:run[4 devices, process 1 of 2]" in names_in_junit
    failed = {case.get("name") for case in junit.iter("testcase") if len(case)}
    assert "honest:run[4 devices, process 0 of 2]" not in failed
    assert alive_under(trees) == []  # no orphan: every process group was killed


def test_the_planted_faults_do_not_show_with_one_process(trees):
    completed, results, _ = check(trees, ["local_mesh", "global_read"], processes=1)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert {r["verdict"] for r in results.values()} == {"equivalent"}


def test_two_jobs_at_once_get_their_own_ports(trees):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(run_entry_processes, trees / "migrated", "honest:run", devices=4,
                            processes=2, timeout=120) for _ in range(2)]
        outcomes = [job.result() for job in jobs]
    for job in outcomes:
        assert [o.ok for o in job] == [True, True], [o.error for o in job]
        assert [int(o.output["arrays"]["leaf1"]) for o in job] == [0, 1]


def test_a_job_whose_coordinator_port_is_taken_runs_again_on_another(trees, monkeypatch):
    """The port is free when drawn, but another socket can take it before the coordinator
    binds it. The coordinator then raises ("Failed to start RPC server", seen in CI) or
    crashes (as here). No process ran the program: the job runs again on another port, and
    the verdict is about the program."""
    import equivalence.multiprocess as multiprocess

    draws = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = multiprocess.free_port
        monkeypatch.setattr(multiprocess, "free_port",
                            lambda: draws.append(1) or next(ports, None) or real())
        outcomes = run_entry_processes(trees / "migrated", "honest:run", devices=4,
                                       processes=2, timeout=120)
    assert len(draws) == 2
    assert [o.ok for o in outcomes] == [True, True], [o.error for o in outcomes]


def test_a_program_that_fails_after_joining_is_not_run_again(tmp_path):
    (tmp_path / "fails.py").write_text(
        "import os\nimport jax\n\n\ndef run():\n"
        f"    with open({str(tmp_path / 'runs.txt')!r}, 'a') as runs:\n"
        "        runs.write(f'{jax.process_index()}\\n')\n"
        "    if jax.process_index() == 1:\n        raise RuntimeError('planted')\n"
        "    return {'x': jax.numpy.zeros(())}\n")
    outcomes = run_entry_processes(tmp_path, "fails:run", devices=4, processes=2, timeout=120)
    assert not outcomes[1].ok and "planted" in outcomes[1].error
    runs = (tmp_path / "runs.txt").read_text().split()  # process 0 may be stopped first
    assert runs.count("1") == 1 and runs.count("0") <= 1

def test_coordinator_ports_are_drawn_where_the_os_never_hands_ports_out():
    import equivalence.multiprocess as multiprocess

    low, _ = multiprocess._ephemeral_range()
    assert all(1024 <= multiprocess.free_port() < low for _ in range(20))

# --style global (transforms/global_view/multiprocess.py): the fixture's migration, honest and
# with a planted fault that only shows with several processes.
GLOBAL_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_train"
PER_DEVICE_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_per_device_results"
AXES_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_axes"  # two meshes, two axis names
# Host values made global once, where they are bound (placement_bindings.py).
CONVERT_ONCE_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_convert_once"
# A partial step called with per-device keys by keyword (each process's own rows).
KEYWORD_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_keyword_calls"
# Steps under conditions: a collective step under a parameter's condition, a value replicated
# there kept stacked, a step without collectives on process 0 alone.
CONDITIONAL_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_conditional_steps"
TUPLE_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_tuple_results"  # all replicated
STATIC_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_static_arguments"
# A global caller calling a function whose pmap (over one device per host) keeps the contract.
CONTRACT_CALLEE_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_contract_callee"
# The second axis's mesh over this process's devices only: its collectives stop at the host.
AXES_LOCAL_MESH = ("return jax.make_mesh((jax.device_count(),), (axis_name,)",
                   "return jax.make_mesh((jax.device_count() if axis_name != 'eval' else "
                   "jax.local_device_count(),), (axis_name,)")
# Per-device results returned as the global array (every process's rows) where pmap gave each
# process its own rows.
GLOBAL_READ_FAULT = ("multihost_utils.global_array_to_host_local_array(",
                     "(lambda out, mesh, spec: out)(")
GLOBAL_FAULTS = {
    # The process's rows placed as if they were the whole batch: each process's 16 rows are
    # spread over all 8 devices, so every device sees other rows than pmap gave it.
    "batch_put": ('jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), x)',
                  'jax.device_put(x, NamedSharding(mesh, P("batch")))'),
    # A mesh over this process's devices only: the collectives stop at the host.
    "global_local_mesh": ("jax.make_mesh((jax.device_count(),)",
                          "jax.make_mesh((jax.local_device_count(),)"),
    # The processes' blocks of the mesh in the wrong order: no error, but device 0 of the
    # mesh now holds process 1's first row, so axis_index picks other data (silently).
    "process_order": (
        'jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))',
        ('jax.sharding.Mesh(np.array([d for p in reversed(range(jax.process_count())) '
         'for d in jax.local_devices(p)]), (axis_name,), axis_types=(AxisType.Auto,))')),
}


@pytest.fixture(scope="module")
def global_trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("multiprocess_global_check")
    before = (GLOBAL_CASE / "before.py").read_bytes()
    after = migrate_source(before, style="global").source
    assert after == (GLOBAL_CASE / "after.py").read_bytes()
    assert b"_pmap_style_shard_map" not in after and b"make_array_from_process_local_data" in after
    for side in ("orig", "migrated"):
        (root / side).mkdir()
    per_device = (PER_DEVICE_CASE / "before.py").read_bytes()
    per_device_after = (PER_DEVICE_CASE / "after.py").read_bytes()
    modules = {"global_honest": (before, after),
               **{k: (before, planted(after, v)) for k, v in GLOBAL_FAULTS.items()},
               "per_device_honest": (per_device, per_device_after),
               "per_device_global_read": (per_device, planted(per_device_after, GLOBAL_READ_FAULT)),
               "axes_honest": ((AXES_CASE / "before.py").read_bytes(),
                               (AXES_CASE / "after.py").read_bytes()),
               "axes_local_mesh": ((AXES_CASE / "before.py").read_bytes(),
                                   planted((AXES_CASE / "after.py").read_bytes(), AXES_LOCAL_MESH)),
               "convert_once_honest": ((CONVERT_ONCE_CASE / "before.py").read_bytes(),
                                       (CONVERT_ONCE_CASE / "after.py").read_bytes()),
               "keyword_calls_honest": ((KEYWORD_CASE / "before.py").read_bytes(),
                                        (KEYWORD_CASE / "after.py").read_bytes()),
               # its own copy of the device_put_replicated helper, as a user's module has
               "conditional_honest": ((CONDITIONAL_CASE / "before.py").read_bytes(), migrate_source(
                   (CONDITIONAL_CASE / "before.py").read_bytes(), style="global").source),
               "tuple_results_honest": ((TUPLE_CASE / "before.py").read_bytes(),
                                        (TUPLE_CASE / "after.py").read_bytes()),
               "static_arguments_honest": ((STATIC_CASE / "before.py").read_bytes(),
                                           (STATIC_CASE / "after.py").read_bytes()),
               # its own copy of the contract functions, as a user's module has
               "contract_callee_honest": ((CONTRACT_CALLEE_CASE / "before.py").read_bytes(),
                                          migrate_source((CONTRACT_CALLEE_CASE / "before.py")
                                                         .read_bytes(), style="global").source)}
    for name, (original, migrated) in modules.items():
        (root / "orig" / f"{name}.py").write_bytes(original)
        (root / "migrated" / f"{name}.py").write_bytes(migrated)
    return root


def test_global_style_faults_show_only_with_two_processes(global_trees):
    names = ["global_honest", *GLOBAL_FAULTS, "per_device_honest", "per_device_global_read"]
    two, results, junit = check(global_trees, names, processes=2, devices=8, timeout=120,
                                extra=["--style=global"])
    assert two.returncode == 1, two.stdout[-3000:]
    for process in (0, 1):
        for honest in ("global_honest", "per_device_honest"):
            assert results[(honest, process)]["verdict"] == "equivalent", results[(honest, process)]
        # Outputs compared through the layout map: the replicated params lost their device axis.
        assert results[("global_honest", process)]["layout"]["verdict"] == "equivalent"
        for fault in [*GLOBAL_FAULTS, "per_device_global_read"]:
            assert results[(fault, process)]["verdict"] == "different", (fault, process)
    # The silent one is caught by the comparison of outputs, not by an error.
    for process in (0, 1):
        order = results[("process_order", process)]
        assert order["migrated"]["ok"] and order["outputs"]["verdict"] == "different"
        assert any(d.startswith("['first']") for d in order["outputs"]["differences"]), order
    failed = {case.get("name") for case in junit.iter("testcase") if len(case)}
    assert "batch_put:run[8 devices, process 1 of 2]" in failed
    one, results, _ = check(global_trees, names, processes=1, devices=8, timeout=120,
                            extra=["--style=global"])
    assert one.returncode == 0, one.stdout[-3000:]
    assert {r["verdict"] for r in results.values()} == {"equivalent"}
    assert alive_under(global_trees) == []


def test_global_style_meshes_of_two_axis_names_at_two_processes(global_trees):
    """Each process's rows made global on the mesh of the site taking them; both meshes span
    every process's devices. A second mesh over one process's devices is caught. (With them:
    values converted once where bound, a keyword argument made global at its call, and steps
    run under conditions.)"""
    names = ["axes_honest", "axes_local_mesh", "convert_once_honest", "keyword_calls_honest",
             "conditional_honest", "tuple_results_honest", "static_arguments_honest",
             "contract_callee_honest"]
    two, results, _ = check(global_trees, names, processes=2, devices=8, timeout=120,
                            extra=["--style=global"])
    assert two.returncode == 1, two.stdout[-3000:]
    for process in (0, 1):
        assert results[("axes_honest", process)]["verdict"] == "equivalent", results
        # (and a value placed once where it is bound, each batch once per iteration)
        assert results[("convert_once_honest", process)]["verdict"] == "equivalent", results
        assert results[("keyword_calls_honest", process)]["verdict"] == "equivalent", results
        assert results[("conditional_honest", process)]["verdict"] == "equivalent", results
        assert results[("tuple_results_honest", process)]["verdict"] == "equivalent", results
        assert results[("static_arguments_honest", process)]["verdict"] == "equivalent", results
        assert results[("contract_callee_honest", process)]["verdict"] == "equivalent", results
        assert results[("axes_local_mesh", process)]["verdict"] != "equivalent", results
    assert alive_under(global_trees) == []


FLAX_CASE = ROOT / "tests" / "fixtures_global" / "multiprocess_flax_prefetch_sync"


def test_flax_prefetch_and_a_helper_syncing_statistics_at_two_processes(tmp_path):
    """flax imagenet's shape, with flax itself on each side: prefetched batches made global at
    the step's call, a stacked state, and a mean of another axis run inside the helper that
    syncs it. Each process's results against the original's."""
    for side in ("orig", "migrated"):
        (tmp_path / side).mkdir()
    (tmp_path / "orig" / "flax_honest.py").write_bytes((FLAX_CASE / "before.py").read_bytes())
    (tmp_path / "migrated" / "flax_honest.py").write_bytes(
        migrate_source((FLAX_CASE / "before.py").read_bytes(), style="global").source)
    link_flax_or_skip(tmp_path / "orig", tmp_path / "migrated")
    completed, results, _ = check(tmp_path, ["flax_honest"], processes=2, devices=8,
                                  timeout=180, extra=["--style=global"])
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert [results[("flax_honest", p)]["verdict"] for p in (0, 1)] == ["equivalent"] * 2
