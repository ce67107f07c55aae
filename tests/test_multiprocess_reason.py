"""Why multi-process modules get their own helper: a real two-process run on one machine.

Two processes with 4 CPU devices each, joined by jax.distributed (gloo), each pass their
host-local batch to the same pmapped function. jax.pmap gives the global result on jax 0.10.2
exactly as the legacy pmap on 0.4.38 does; the single-process helper the tool writes builds its
mesh from jax.devices()[:n], process 0's devices on every host, so process 0 silently reduces
over its own 4 devices and process 1 cannot even read its output (the multi-process helper is
tested in tests/test_multiprocess_helper.py). Slow-marked (it needs free
local ports and two interpreters): `python -m pytest -m slow tests/test_multiprocess_reason.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import legacy_python_or_skip
from equivalence.multiprocess import free_port
from transforms.pipeline import migrate_source

WORKER = textwrap.dedent('''
    import importlib.util, json, os, sys
    pid, port, mode, migrated = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # needed on 0.4.38
    except Exception:
        pass
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=pid)
    import jax.numpy as jnp, numpy as np

    def body(x):
        return jax.lax.psum(x, "i") + jax.lax.axis_index("i") * 100

    if mode == "pmap":
        f = jax.pmap(body, axis_name="i")
    else:
        spec = importlib.util.spec_from_file_location("migrated", migrated)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        f = module._pmap_style_shard_map(body, axis_name="i")
    try:
        out = f(jnp.arange(4.0) + 4 * pid)  # each host's local batch
        print(json.dumps({"out": np.asarray(out).tolist()}))
    except Exception as error:
        print(json.dumps({"error": type(error).__name__}))
''')


def _two_processes(python: str, mode: str, tmp_path) -> list[dict]:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    migrated = tmp_path / "migrated.py"
    migrated.write_bytes(migrate_source(b"import jax\nf = jax.pmap(abs, axis_name='i')\n").source)
    port = str(free_port())
    runs = [subprocess.Popen([python, str(worker), str(pid), port, mode, str(migrated)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for pid in (0, 1)]
    try:
        outputs = [run.communicate(timeout=120)[0] for run in runs]
    finally:
        for run in runs:
            run.kill()
    return [json.loads(text.strip().splitlines()[-1]) for text in outputs]


# psum over all 8 devices of 0..7 is 28; axis_index is global (process 1 holds 4..7).
GLOBAL = [{"out": [28.0, 128.0, 228.0, 328.0]}, {"out": [428.0, 528.0, 628.0, 728.0]}]


@pytest.mark.slow
def test_pmap_is_global_on_both_versions_and_the_single_process_helper_is_not(tmp_path):
    assert _two_processes(legacy_python_or_skip(), "pmap", tmp_path) == GLOBAL
    assert _two_processes(sys.executable, "pmap", tmp_path) == GLOBAL
    helper = _two_processes(sys.executable, "helper", tmp_path)
    assert helper[0] == {"out": [6.0, 106.0, 206.0, 306.0]}  # process 0's devices only
    assert "error" in helper[1]
