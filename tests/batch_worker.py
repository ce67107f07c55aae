"""Run the `run()` of several program modules in ONE process, one after the other, and save each
one's outputs and compiled HLO apart, as `equivalence/worker.py` saves a single entry.

Used by tests/batch_check.py for the generated-program sweeps: starting JAX on 8 fake devices
costs more than most generated programs do, so one process runs a batch of them. This file runs
under any interpreter (the legacy JAX too): it imports only the standard library and the
harness's own worker, by path, which imports only numpy and jax.

usage: python batch_worker.py ROOT HLO_DIR OUT_DIR MODULE [MODULE ...]
For each MODULE: OUT_DIR/MODULE/{outputs.npz, result.json} (the worker's format) and
OUT_DIR/MODULE/hlo/ holding the HLO dumps written while that module ran. The parent sets
XLA_FLAGS so that XLA dumps into HLO_DIR.
"""

import importlib.util
import os
import shutil
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "equivalence",
                      "worker.py")


def main(root, hlo_dir, out_dir, modules):
    spec = importlib.util.spec_from_file_location("_equivalence_worker", WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    worker.exit_with_parent(kill_group=True)  # batch_check starts it in a new session
    os.makedirs(hlo_dir, exist_ok=True)
    for module in modules:
        before = set(os.listdir(hlo_dir))
        program_dir = os.path.join(out_dir, module)
        os.makedirs(program_dir)
        # The worker converts every output leaf to numpy, which waits for the device work;
        # JAX compiles synchronously at dispatch, so every dump this module caused is written.
        worker.main(root, f"{module}:run", program_dir)
        own = os.path.join(program_dir, "hlo")
        os.makedirs(own)
        for name in sorted(set(os.listdir(hlo_dir)) - before):
            shutil.move(os.path.join(hlo_dir, name), os.path.join(own, name))
        sys.stdout.write(f"{module} done\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
