"""Function-level check: draw inputs, call the original and the migrated function, compare,
and let hypothesis shrink a difference to a minimal input.

The user's strategy (or example list) lives in user code, so this module runs as its own
subprocess (`python -m equivalence.properties ...`), started by `pmap-migrate check
--function`; each side's function runs in a `call_worker` process of its own interpreter.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from equivalence.runner import cpu_thread_pool_size

HERE = Path(__file__).resolve().parent


class Side:
    """A persistent call_worker process for one side."""

    def __init__(self, python: str, root: Path, function: str, env: dict, scratch: Path):
        self.scratch = scratch
        self.process = subprocess.Popen(
            [python, str(HERE / "call_worker.py"), str(root), function],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(root),
            env=dict(env, PMAP_MIGRATE_HARNESS_PID=str(os.getpid())),  # worker.exit_with_parent
        )
        self.calls = 0

    def call(self, args: tuple) -> dict:
        self.calls += 1
        path = self.scratch / f"{id(self)}-{self.calls}.pkl"
        path.write_bytes(pickle.dumps(args))
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if not answer:
            return {"ok": False, "error": f"worker died (exit {self.process.poll()})"}
        return pickle.loads(Path(answer).read_bytes())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            self.process.wait(timeout=30)


def as_saved(output) -> dict:
    """A pytree of numpy arrays in the shape compare_outputs takes."""
    leaves, paths = [], []

    def walk(node, path):
        if isinstance(node, dict):
            for key in sorted(node):
                walk(node[key], f"{path}[{key!r}]")
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
        else:
            paths.append(path or "<root>")
            leaves.append(np.asarray(node))

    walk(output, "")
    arrays = {f"leaf{i}": leaf for i, leaf in enumerate(leaves)}
    described = [{"path": p, "key": f"leaf{i}"} for i, p in enumerate(paths)]
    return {"treedef": _structure(output), "leaves": described, "arrays": arrays}


def _structure(node) -> str:
    if isinstance(node, dict):
        return "{" + ", ".join(f"{k!r}: {_structure(node[k])}" for k in sorted(node)) + "}"
    if isinstance(node, (list, tuple)):
        inner = ", ".join(_structure(x) for x in node)
        return f"({inner})" if isinstance(node, tuple) else f"[{inner}]"
    return "*"


def describe(args: tuple) -> str:
    def one(x):
        if isinstance(x, np.ndarray):
            return f"array(shape={x.shape}, dtype={x.dtype}, values={np.array2string(x.ravel()[:8])}...)"
        return repr(x)[:200]

    return "(" + ", ".join(one(a) for a in args) + ")"


def main() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from equivalence.compare import compare_outputs

    parser = argparse.ArgumentParser()
    parser.add_argument("original")
    parser.add_argument("migrated")
    parser.add_argument("--function", required=True)
    parser.add_argument("--inputs", required=True, help="MODULE:NAME of a strategy or example list")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--reference-python", default=sys.executable)
    parser.add_argument("--max-examples", type=int, default=50)
    parser.add_argument("--report", required=True)
    options = parser.parse_args()

    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={options.devices}",
               JAX_PLATFORMS="cpu", JAX_THREEFRY_PARTITIONABLE="1",
               PJRT_NPROC=str(cpu_thread_pool_size(options.devices)))
    os.environ.update(env)
    sys.path.insert(0, options.original)
    module_name, _, name = options.inputs.partition(":")
    provided = getattr(importlib.import_module(module_name), name)
    if callable(provided) and not isinstance(provided, st.SearchStrategy):
        provided = provided()
    strategy = provided if isinstance(provided, st.SearchStrategy) else st.sampled_from(list(provided))

    with tempfile.TemporaryDirectory(prefix="pmap-migrate-prop-") as scratch:
        scratch = Path(scratch)
        original = Side(options.reference_python, Path(options.original), options.function, env, scratch)
        migrated = Side(sys.executable, Path(options.migrated), options.function, env, scratch)
        state = {"examples": 0, "failure": None}

        @settings(max_examples=options.max_examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def property_(args):
            args = tuple(args)
            state["examples"] += 1
            a, b = original.call(args), migrated.call(args)
            if not a["ok"]:
                return  # pmap rejects this input too; nothing to compare
            problems = [f"migrated raised {b['error']}"] if not b["ok"] else [
                str(d) for d in compare_outputs(as_saved(a["output"]), as_saved(b["output"]))
            ]
            if b["ok"] and a["deleted"] != b["deleted"]:
                problems.append(
                    f"donated inputs deleted: original {a['deleted']}, migrated {b['deleted']}"
                )
            if problems:
                state["failure"] = {"input": describe(args), "differences": problems}
                raise AssertionError("; ".join(problems))

        try:
            property_()
            verdict = "equivalent"
        except AssertionError:
            verdict = "different"
        finally:
            original.close()
            migrated.close()
    Path(options.report).write_text(json.dumps(
        {"function": options.function, "devices": options.devices, "verdict": verdict,
         "examples": state["examples"], "minimal_failure": state["failure"]}, indent=2))


if __name__ == "__main__":
    main()
