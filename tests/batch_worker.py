"""Run the `run()` of several program modules in ONE process, one after the other, and save each
one's outputs and compiled HLO apart, as `equivalence/worker.py` saves a single entry.

Used by tests/batch_check.py for the generated-program sweeps: starting JAX on 8 fake devices
costs more than most generated programs do, so one process runs a batch of them. This file runs
under any interpreter (the legacy JAX too): it imports only the standard library and the
harness's own worker, by path, which imports only numpy and jax.

usage: python batch_worker.py ROOT HLO_DIR OUT_DIR PROGRAM [PROGRAM ...]
A PROGRAM is a MODULE of ROOT (its `run()` runs), or NAME=ENTRY: a program of several files in
ROOT/NAME, its ENTRY ("pkg.main:run", "nb.ipynb:NAME") run with ROOT/NAME as its root; its
modules are forgotten after it (the next program's package may have the same name), and a
notebook's masked cells are already in OUT_DIR/NAME (batch_check.py wrote them).
For each: OUT_DIR/NAME/{outputs.npz, result.json} (the worker's format) and OUT_DIR/NAME/hlo/
holding the HLO dumps written while it ran. The parent sets XLA_FLAGS so that XLA dumps into
HLO_DIR.
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
    cwd = os.getcwd()
    for program in modules:
        module, _, entry = program.partition("=")
        before = set(os.listdir(hlo_dir))
        program_dir = os.path.join(out_dir, module)
        os.makedirs(program_dir, exist_ok=True)
        # The worker converts every output leaf to numpy, which waits for the device work;
        # JAX compiles synchronously at dispatch, so every dump this module caused is written.
        if entry:
            folder = os.path.join(root, module)
            worker.main(folder, entry, program_dir)
            _forget(folder)
            os.chdir(cwd)  # a notebook entry runs in its folder
        else:
            worker.main(root, f"{module}:run", program_dir)
        own = os.path.join(program_dir, "hlo")
        os.makedirs(own)
        for name in sorted(set(os.listdir(hlo_dir)) - before):
            shutil.move(os.path.join(hlo_dir, name), os.path.join(own, name))
        sys.stdout.write(f"{module} done\n")
        sys.stdout.flush()


def _forget(folder):
    """Drop the folder from sys.path and its modules from sys.modules."""
    folder = os.path.abspath(folder)
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != folder]
    inside = folder + os.sep
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if os.path.abspath(path).startswith(inside):
            del sys.modules[name]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
