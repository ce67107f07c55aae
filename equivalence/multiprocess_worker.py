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


def main(root, entry, out_dir, coordinator, processes, process_id):
    try:
        join(coordinator, int(processes), int(process_id))
    except BaseException as error:  # noqa: BLE001 - say why, the parent reports it
        with open(os.path.join(out_dir, "result.json"), "w") as handle:
            json.dump({"entry": entry, "ok": False, "seconds": 0.0,
                       "error": f"jax.distributed.initialize failed: {type(error).__name__}: {error}",
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
