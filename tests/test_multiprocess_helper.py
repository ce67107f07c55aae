"""The multi-process helper keeps pmap's multi-process contract: a real two-process run.

Two processes with 4 CPU devices each, joined by jax.distributed (gloo), call the helper a
multi-process module gets (the `if multiprocess` variant of
transforms/templates/pmap_style_shard_map.py) and the legacy jax.pmap (jax 0.4.38) the same
way, each with its host-local slice: psum and axis_index span all 8 devices, outputs are
host-local, numpy inputs, a replicated (P()) argument and output, a static argument,
donation, and `.lower(...).compile()(...)` from arrays and from shapes. The helper gives the
legacy pmap's values on jax 0.10.2 and, written for --target-jax 0.4.38, on jax 0.4.38.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import legacy_python_or_skip
from equivalence.multiprocess import free_port
from transforms.pipeline import migrate_source
from transforms.target import TargetJax

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
    P = jax.sharding.PartitionSpec

    if mode == "pmap":
        def mapped(fun, axis_name, in_axes=0, out_axes=0, static=(), donate=()):
            return jax.pmap(fun, axis_name, in_axes=in_axes, out_axes=out_axes,
                            static_broadcasted_argnums=static, donate_argnums=donate)
    else:
        spec = importlib.util.spec_from_file_location("migrated", migrated)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def mapped(fun, axis_name, in_axes=0, out_axes=0, static=(), donate=()):
            specs = lambda axes: P(axis_name) if axes == 0 else tuple(
                P() if a is None else P(axis_name) for a in axes)
            return module._pmap_style_shard_map(
                fun, axis_name, in_specs=specs(in_axes), out_specs=specs(out_axes),
                static_argnums=static, donate_argnums=donate)

    out = {}
    f = mapped(lambda x: jax.lax.psum(x, "i") + jax.lax.axis_index("i") * 100, "i")
    x = jnp.arange(4.0) + 4 * pid
    out["psum"] = np.asarray(f(x)).tolist()
    out["numpy"] = np.asarray(f(np.arange(4.0) + 4 * pid)).tolist()
    out["static"] = np.asarray(mapped(lambda x, k: x * k, "i", static=(1,))(x, 3)).tolist()
    g = mapped(lambda w, b: (w + jax.lax.pmean(b, "i"), jax.lax.psum(b, "i")), "i",
               in_axes=(0, None), out_axes=(0, None), donate=(0,))
    w = jax.device_put_sharded([jnp.full(2, float(pid)) for _ in range(4)], jax.local_devices()) \\
        if hasattr(jax, "device_put_sharded") else jax.make_array_from_process_local_data(
            jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(
                [d for p in range(2) for d in jax.local_devices(p)]), ("i",)).local_mesh, P("i")),
            np.full((4, 2), float(pid), np.float32))
    new_w, total = g(w, jnp.ones(2) * (pid + 1))
    out["donated"] = [np.asarray(new_w).tolist(), np.asarray(total).tolist(), w.is_deleted()]
    if mode != "pmap":  # jax.pmap's .lower().compile() skips the conversion (research 2.2 #9)
        out["aot"] = np.asarray(f.lower(x).compile()(x)).tolist()
        shape = jax.ShapeDtypeStruct((4,), jnp.float32)
        out["aot_shapes"] = np.asarray(f.lower(shape).compile()(x)).tolist()
    print(json.dumps(out))
''')


def two_processes(python: str, mode: str, migrated, tmp_path) -> list[dict]:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    port = str(free_port())
    runs = [subprocess.Popen([python, str(worker), str(pid), port, mode, str(migrated)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
            for pid in (0, 1)]
    try:
        outputs = [run.communicate(timeout=180) for run in runs]
    finally:
        for run in runs:
            run.kill()
    for (stdout, stderr), run in zip(outputs, runs):
        assert run.returncode == 0, stderr[-3000:]
    return [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]


def migrated_module(tmp_path, target: str):
    path = tmp_path / f"migrated_{target.replace('.', '_')}.py"
    source = (b"import jax\nhosts = jax.process_count()\nf = jax.pmap(abs, axis_name='i')\n"
              # The worker calls the helper with static and donated arguments too.
              b"g = jax.pmap(abs, axis_name='i', static_broadcasted_argnums=1, donate_argnums=0)\n")
    path.write_bytes(migrate_source(source, TargetJax.parse(target)).source)
    return path


# psum over all 8 devices of 0..7 is 28; axis_index is global (process 1 holds 4..7).
PSUM = [[28.0, 128.0, 228.0, 328.0], [428.0, 528.0, 628.0, 728.0]]


def test_helper_has_legacy_pmaps_multiprocess_contract_on_both_jax_versions(tmp_path):
    legacy = legacy_python_or_skip()
    reference = two_processes(legacy, "pmap", "-", tmp_path)
    assert [r["psum"] for r in reference] == PSUM
    for python, target in ((sys.executable, "0.10"), (legacy, "0.4.38")):
        runs = two_processes(python, "helper", migrated_module(tmp_path, target), tmp_path)
        for pid, (run, expected) in enumerate(zip(runs, reference)):
            assert run["aot"] == run["aot_shapes"] == PSUM[pid], target
            assert {k: v for k, v in run.items() if not k.startswith("aot")} == expected, target
