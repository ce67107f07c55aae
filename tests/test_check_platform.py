"""`check --platform`: entries run on an accelerator's real devices instead of fake CPU ones
(benchmarks/on_accelerator.sh runs the corpus so on a TPU), and a run whose device count is
not the one asked for fails instead of being reported under the wrong count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from equivalence.runner import WORKER, worker_environment

ROOT = Path(__file__).resolve().parent.parent


def test_an_accelerator_has_no_fake_devices_and_names_its_count():
    cpu = worker_environment(4, None)
    tpu = worker_environment(1, None, platform="tpu")
    assert "--xla_force_host_platform_device_count=4" in cpu["XLA_FLAGS"]
    assert cpu["JAX_PLATFORMS"] == "cpu" and "PMAP_MIGRATE_DEVICES" not in cpu
    assert "xla_force_host_platform_device_count" not in tpu["XLA_FLAGS"]
    assert tpu["JAX_PLATFORMS"] == "tpu" and tpu["PMAP_MIGRATE_DEVICES"] == "1"


def test_a_device_count_other_than_the_one_asked_for_fails_the_run(tmp_path):
    (tmp_path / "prog.py").write_text("import jax\n\ndef run():\n    return jax.numpy.ones(2)\n")
    env = worker_environment(2, None)
    env["PMAP_MIGRATE_DEVICES"] = "4"  # as on an accelerator with 2 devices, asked for 4
    subprocess.run([sys.executable, str(WORKER), str(tmp_path), "prog:run", str(tmp_path)],
                   env=env, cwd=tmp_path, check=True, timeout=120)
    result = json.loads((tmp_path / "result.json").read_text())
    assert not result["ok"]
    assert "2 cpu devices here, 4 asked for (--devices)" in result["error"]


def test_the_worker_starts_the_backend_only_when_the_program_does(tmp_path):
    """A program's own set-up before its first use of jax (environment, distributed
    initialisation) still reaches the backend: the device count is read after the entry."""
    (tmp_path / "prog.py").write_text(
        "import os\nimport jax\n\nos.environ['XLA_FLAGS'] = "
        "'--xla_force_host_platform_device_count=3'\n\n"
        "def run():\n    return jax.numpy.zeros(jax.device_count())\n")
    env = worker_environment(1, None, platform="tpu")  # counted after the run...
    env.update(JAX_PLATFORMS="cpu", PMAP_MIGRATE_DEVICES="3")  # ...on the program's 3 devices
    subprocess.run([sys.executable, str(WORKER), str(tmp_path), "prog:run", str(tmp_path)],
                   env=env, cwd=tmp_path, check=True, timeout=120)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["ok"], result.get("error")
    assert result["leaves"][0]["shape"] == [3]


def test_an_accelerator_is_refused_with_several_processes():
    done = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", "corpus", "--entry",
         "collectives_zoo:run", "--platform", "tpu", "--processes", "2", "--devices", "2"],
        cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2
    assert "--platform" in done.stderr and "one process" in done.stderr


def test_a_report_in_a_folder_not_made_yet_is_written_there(tmp_path):
    """The folder of --report-json / --junit is made before the runs, as CI scripts expect."""
    report = tmp_path / "out" / "deeper" / "check.json"
    done = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", "corpus", "--entry", "static_args:run",
         "--devices", "2", "--repeat", "1", "--report-json", str(report)],
        cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(report.read_text())["summary"]["checks"] == 1


def test_a_report_that_cannot_be_written_is_refused_before_any_run(tmp_path):
    (tmp_path / "file").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "migrator.cli", "check", "corpus", "--entry", "static_args:run",
         "--report-json", str(tmp_path / "file" / "check.json")],
        cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2 and "--report-json" in done.stderr
