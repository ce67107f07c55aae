"""Call one function repeatedly with pickled arguments: the per-side process of the
function-level (property) check. Imports only the standard library, numpy and jax, so it runs
under any interpreter (e.g. a legacy-JAX virtualenv).

usage: python call_worker.py ROOT MODULE:FUNCTION
Protocol, one line each way: the parent writes the path of a pickle holding an argument
tuple; the worker answers with the path of a pickle holding {"ok": True, "output": ...} (a
pytree of numpy arrays) or {"ok": False, "error": "..."}. An empty line ends the worker.
"""

import importlib
import os
import pickle
import sys
import traceback


def place(jax, np, args):
    """Put each array whose leading axis is the device count on the devices, the way this
    JAX version's pmap lays out its own outputs, so that donation can take effect and be
    observed (`is_deleted`) as it would be for a step fed by the previous step."""
    devices = jax.devices()
    n = len(devices)

    def one(x):
        if not isinstance(x, np.ndarray) or x.ndim == 0 or x.shape[0] != n:
            return x
        if hasattr(jax, "device_put_sharded"):  # legacy pmap: PmapSharding
            return jax.device_put_sharded(list(x), devices)
        mesh = jax.sharding.Mesh(np.array(devices), ("_placed",))
        return jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("_placed")))

    return jax.tree_util.tree_map(one, args)


def main(root, target):
    sys.path.insert(0, root)
    import jax
    import numpy as np

    module_name, _, name = target.partition(":")
    function = getattr(importlib.import_module(module_name), name)
    for line in sys.stdin:
        path = line.strip()
        if not path:
            break
        with open(path, "rb") as handle:
            args = place(jax, np, pickle.load(handle))
        try:
            output = jax.tree_util.tree_map(lambda x: np.asarray(jax.device_get(x)), function(*args))
            deleted = [bool(getattr(leaf, "is_deleted", lambda: False)())
                       for leaf in jax.tree_util.tree_leaves(args)]
            answer = {"ok": True, "output": output, "deleted": deleted}
        except Exception as error:  # noqa: BLE001 - report it to the parent
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()[-2000:]}
        with open(path + ".out", "wb") as handle:
            pickle.dump(answer, handle)
        sys.stdout.write(path + ".out\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import worker

    # Between calls the end of stdin ends it; during a long call, this does. Its group is the
    # harness's own: only this process goes.
    worker.exit_with_parent(kill_group=False)
    main(sys.argv[1], sys.argv[2])
