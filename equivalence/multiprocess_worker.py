"""Run one entry point as one process of a jax.distributed job. Runs in a subprocess.

Like worker.py (which it calls), this file runs under any Python with JAX, so it imports only
the standard library, numpy, jax and its sibling worker.py, never this project. The parent
sets XLA_FLAGS (this process's device count, its HLO dump folder) before it starts.

usage: python multiprocess_worker.py ROOT MODULE:FUNCTION OUT_DIR COORDINATOR PROCESSES PROCESS_ID
"""

import json
import os
import sys
import traceback


def join(coordinator, processes, process_id):
    """Join the job: CPU collectives over gloo (jax 0.4.38 has no other multi-process CPU
    collectives; on current JAX it is the default)."""
    import jax

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, KeyError, ValueError):
        pass
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=processes, process_id=process_id
    )


JOINED = "joined"  # written in the process's folder once it has joined the job

# Read from the environment (the harness leaves it unset): "auto" serialises dispatch where
# the JAX version needs it (serial_dispatch_needed), "1" always, "0" never (measurements).
SERIAL_DISPATCH = "PMAP_MIGRATE_SERIAL_DISPATCH"


def serial_dispatch_needed(jax):
    """jax < 0.5 with gloo: XLA:CPU's gloo collectives have no tags (every collective of a
    device group shares one communicator and its message slots), and its client starts the
    next multi-device program as soon as one device of the previous one is done. Two
    programs whose cross-process collectives overlap (an AOT-compiled pmap and a direct call
    of it, in flight at once) then exchange each other's messages: wrong values, or a hang."""
    major, minor = (int(part) for part in jax.__version__.split(".")[:2])
    return (major, minor) < (0, 5)


def serialize_dispatch(jax):
    """Make every program execution of this process wait for its results before the next one
    starts: jax 0.4's Python dispatch paths (pmap, jit, AOT-compiled calls all run through
    ExecuteReplicated) block on their outputs, and the C++ fast paths that would skip them
    are off. Async dispatch is not observable in values, so what the program computes,
    compiles and donates is unchanged; only programs never overlap."""
    from jax._src import api, pjit
    from jax._src.interpreters import pxla

    execute = pxla.ExecuteReplicated.__call__

    def execute_and_wait(self, *args):
        out = execute(self, *args)
        jax.block_until_ready(out)
        return out

    pxla.ExecuteReplicated.__call__ = execute_and_wait
    pjit._get_fastpath_data = lambda *args, **kwargs: None  # jit: no C++ fast path
    pxla.MeshExecutable.create_cpp_call = lambda self, *args, **kwargs: None  # AOT calls
    cpp_pmap = api.pmap_lib.pmap

    def pmap_without_fast_path(fun, cache_miss, *args, **kwargs):
        def every_call_in_python(*call_args, **call_kwargs):
            return cache_miss(*call_args, **call_kwargs)[0], None

        return cpp_pmap(fun, every_call_in_python, *args, **kwargs)

    class PmapLib:  # the extension module, with pmap's fast path turned off
        def __getattr__(self, name):
            return getattr(api.pmap_lib_without_serial_dispatch, name)

    api.pmap_lib_without_serial_dispatch = api.pmap_lib
    shim = PmapLib()
    shim.pmap = pmap_without_fast_path
    api.pmap_lib = shim


def main(root, entry, out_dir, coordinator, processes, process_id):
    step = "jax.distributed.initialize"
    try:
        join(coordinator, int(processes), int(process_id))
        # The parent runs a job again when one of its processes never joined (its
        # coordinator could not start, say: then no process ran the program).
        open(os.path.join(out_dir, JOINED), "w").close()
        step = "serialising dispatch"
        import jax

        mode = os.environ.get(SERIAL_DISPATCH, "auto")
        if mode == "1" or (mode == "auto" and serial_dispatch_needed(jax)):
            serialize_dispatch(jax)
    except BaseException as error:  # noqa: BLE001 - say why, the parent reports it
        with open(os.path.join(out_dir, "result.json"), "w") as handle:
            json.dump({"entry": entry, "ok": False, "seconds": 0.0,
                       "error": f"{step} failed: {type(error).__name__}: {error}",
                       "traceback": traceback.format_exc()[-4000:]}, handle)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import worker

    worker.main(root, entry, out_dir)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import worker

    worker.exit_with_parent(kill_group=True)  # the job's processes share one new group
    # At exit jax.distributed waits for every peer (its shutdown barrier); the parent stops
    # the whole job once each process has written its result or one of them failed.
    main(*sys.argv[1:7])
