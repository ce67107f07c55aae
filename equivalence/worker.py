"""Run one entry point of one program and save what it returned. Runs in a subprocess.

This file is executed by any Python (for example a virtualenv with an old JAX), so it imports
only the standard library, numpy and jax, and never this project. The parent process sets
XLA_FLAGS (device count, HLO dump folder) before this starts.

usage: python worker.py ROOT MODULE:FUNCTION OUT_DIR
   or: python worker.py ROOT path/name.ipynb[:NAME] OUT_DIR (the parent has written the
       notebook's masked code cells to OUT_DIR/notebook_cells.json, equivalence/notebook_entry.py)
   or: python worker.py --serve (a warm worker: equivalence/warm_workers.py)
Writes OUT_DIR/outputs.npz (one array per leaf, keyed by leaf index) and OUT_DIR/result.json
(key paths, dtypes, jax version, wall time, or the error).
"""

import importlib
import json
import os
import select
import signal
import sys
import threading
import time
import traceback

# The harness's pid, set by equivalence.runner.worker_environment.
PARENT_PID = "PMAP_MIGRATE_HARNESS_PID"


def exit_with_parent(kill_group, poll_seconds=0.5, parent=None):
    """End this process as soon as the harness that started it is gone. A `check` killed
    with SIGKILL (an OOM kill, a CI runner stopping its job) cannot stop its workers, and a
    worker left behind runs the program on for minutes. `kill_group`: this process's group
    holds only the run's own processes (the harness started it in a new session or group),
    so they go too. `parent`: the pid to outlive no longer (a warm worker's run watches the
    warm worker, which watches the harness)."""
    parent = parent or int(os.environ.get(PARENT_PID) or os.getppid())

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        if kill_group:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _key_path(path):
    return "".join(str(k) for k in path) or "<root>"


class CellError(Exception):
    """A notebook cell raised: its number (1-based among the code cells) and line."""


def run_notebook(root, entry, out_dir):
    """Run the notebook's code cells top to bottom in one namespace, with the notebook's
    folder on sys.path and as working directory (as Jupyter starts a kernel), and return its
    global NAME, or with a bare entry a dict of every global that holds arrays."""
    import asyncio

    path, _, name = entry.partition(":")
    folder = os.path.dirname(os.path.join(root, path)) or root
    sys.path.insert(0, folder)
    os.chdir(folder)
    with open(os.path.join(out_dir, "notebook_cells.json")) as handle:
        cells = json.load(handle)
    import builtins

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    flags = getattr(__import__("ast"), "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    for cell in cells:
        if cell["text"] is None:  # a cell magic whose body is not Python (%%bash)
            continue
        filename = f"<cell {cell['number']}>"
        try:
            code = compile(cell["text"], filename, "exec", flags=flags, dont_inherit=True)
            value = eval(code, namespace)
            if code.co_flags & 0x80:  # CO_COROUTINE: the cell has a top-level await
                asyncio.run(value)
        except BaseException as error:  # noqa: BLE001 - said with its cell and line
            if isinstance(error, SyntaxError) and error.filename == filename:
                line = error.lineno
            else:
                frames = [f for f in traceback.extract_tb(error.__traceback__)
                          if f.filename == filename]
                line = frames[-1].lineno if frames else "?"
            raise CellError(f"cell {cell['number']}, line {line}: "
                            f"{type(error).__name__}: {error}") from error
    if name:
        if name not in namespace:
            raise KeyError(f"the notebook defines no global {name!r}")
        return namespace[name]
    return {key: value for key, value in namespace.items()
            if not (key.startswith("__") and key.endswith("__")) and _holds_arrays(value)}


def _holds_arrays(value):
    """An array (numpy or jax, or a numpy scalar), or a non-empty dict / list / tuple
    (NamedTuple too) of such values."""
    import numpy as np
    import jax

    if isinstance(value, (np.ndarray, jax.Array)):
        return True
    if isinstance(value, np.generic):
        return value.dtype.kind in "biufc"
    if isinstance(value, dict):
        return bool(value) and all(_holds_arrays(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_holds_arrays(v) for v in value)
    return False


def main(root, entry, out_dir):
    module_name, _, function_name = entry.partition(":")
    result = {"entry": entry, "ok": False}
    start = time.perf_counter()
    try:
        sys.path.insert(0, root)
        import numpy as np
        import jax

        result["jax_version"] = jax.__version__
        if entry.partition(":")[0].endswith(".ipynb"):
            value = run_notebook(root, entry, out_dir)
        else:
            function = getattr(importlib.import_module(module_name), function_name)
            value = function()
        # An accelerator's device count, read once the entry has run: asking earlier would
        # start the backend before the program's own set-up (its environment, distributed).
        expected = os.environ.get("PMAP_MIGRATE_DEVICES")
        if expected and jax.local_device_count() != int(expected):
            raise RuntimeError(f"{jax.local_device_count()} {jax.default_backend()} devices "
                               f"here, {expected} asked for (--devices)")
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        result["treedef"] = str(jax.tree_util.tree_structure(value))
        arrays, described = {}, []
        for index, (path, leaf) in enumerate(leaves):
            array = leaf
            if hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                array = jax.random.key_data(leaf)
            try:
                array = np.asarray(jax.device_get(array))
                if array.dtype == object:
                    raise TypeError(f"{type(leaf).__name__} is not an array")
            except Exception as error:  # not an array: say what it is
                described.append({"path": _key_path(path), "type": type(leaf).__name__,
                                  "error": f"not an array: {error}"})
                continue
            arrays[f"leaf{index}"] = array
            entry = {"path": _key_path(path), "key": f"leaf{index}",
                     "dtype": str(array.dtype), "shape": list(array.shape)}
            sharding = getattr(leaf, "sharding", None)
            if sharding is not None and hasattr(leaf, "shape"):
                # Spec level, comparable between PmapSharding and NamedSharding: the shape of
                # one shard, and over how many devices the array lives.
                entry["sharding"] = {"shard_shape": list(sharding.shard_shape(leaf.shape)),
                                     "devices": len(sharding.device_set)}
            described.append(entry)
        np.savez(os.path.join(out_dir, "outputs.npz"), **arrays)
        result.update(ok=True, leaves=described)
    except BaseException as error:  # noqa: BLE001 - report anything, including SystemExit
        result["error"] = (str(error) if isinstance(error, CellError)
                           else f"{type(error).__name__}: {error}")
        result["traceback"] = traceback.format_exc()[-4000:]
    result["seconds"] = time.perf_counter() - start
    with open(os.path.join(out_dir, "result.json"), "w") as handle:
        json.dump(result, handle)


def serve(poll_seconds=0.02):
    """A warm worker: import numpy and jax once, then run each requested entry in a process
    forked from this one, so a run starts where a fresh worker would be after its imports
    (`main` imports jax before the program in both cases; no backend is started here, and
    the child's environment, with its device count and HLO dump folder, is in place before
    the program starts one).

    Requests come one JSON line at a time on stdin: argv (main's ROOT ENTRY OUT_DIR), env,
    cwd, stdout, stderr. Answers go to stdout: {"pid"} once the run is forked (it leads its
    own process group), then {"pid", "returncode"} when it has ended, as Popen reports it.
    Ends when stdin closes or the harness is gone, killing a run in progress."""
    import numpy  # noqa: F401  - the preload
    import jax  # noqa: F401

    harness = os.getppid()
    pending = b""
    while True:
        if os.getppid() != harness:
            os._exit(0)
        if b"\n" not in pending:
            if not select.select([0], [], [], 0.5)[0]:
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                os._exit(0)
            pending += chunk
            continue
        line, _, pending = pending.partition(b"\n")
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_forked(request)
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever runs first
        except OSError:
            pass
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if os.getppid() != harness:
                _kill_group(pid)
                os._exit(0)
            time.sleep(poll_seconds)
        returncode = os.waitstatus_to_exitcode(status)
        os.write(1, json.dumps({"pid": pid, "returncode": returncode}).encode() + b"\n")


def _run_forked(request):
    """The forked child: become the run a fresh worker would have been, run it, and exit."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [os.path.abspath(__file__), *request["argv"]]
        # A fresh interpreter seeds these from the OS; a fork would share the warm worker's.
        import random

        import numpy

        random.seed()
        numpy.random.seed()
        exit_with_parent(kill_group=True, parent=os.getppid())  # the warm worker
        main(*request["argv"])
        code = 0
    except BaseException:  # noqa: BLE001 - main reports the program's errors itself
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pgid, 0)
    except ChildProcessError:
        pass


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    exit_with_parent(kill_group=True)  # the runner starts it in a new session
    main(*sys.argv[1:4])
