"""The helper a multi-process module gets: `_pmap_style_shard_map` with pmap's multi-process
contract (research §2.2 items 8-9, §6).

The single-process helper (transforms/runtime_helper.py) builds its mesh from
`jax.devices()[:n]`, which on several hosts maps process 0's devices everywhere. This variant,
same name and signature, does what `jax/_src/pmap.py` does when `jax.process_count() > 1`: a
mesh over every process's devices grouped by process, global axis size = local size x
process_count, `multihost_utils.host_local_array_to_global_array` on the way in and
`global_array_to_host_local_array` on the way out, donation on the jit of the global arrays,
and `.lower(...).compile()(...)` converting too (which the new pmap skips).

Where it goes (evidence-based generation): only modules that show multi-process use
(transforms/multiprocess.py) get this text; every other module keeps the single-process helper
byte for byte. Inside, the process count is read once per mapped size, when the program is
built: with one process the program is the plain `jax.jit` object, so a call costs exactly
what the single-process helper's call costs.

The source lives in transforms/templates/multiprocess_helper.py, a real Python file (tests
import and run it), read here as text: the transform path never imports JAX.
"""

from __future__ import annotations

import functools
from pathlib import Path

from transforms.runtime_helper import HELPER_MARKER, HELPER_NAME, shard_map_call
from transforms.target import TargetJax

TEMPLATE = Path(__file__).with_name("templates") / "multiprocess_helper.py"
# The template's shard_map call, written for the newest target; replaced for older ones.
_CALL_START = "                # shard_map call: written for the target JAX by pmap-migrate\n"
_CALL_END = "                )(dyn, kwargs)\n"


@functools.lru_cache(maxsize=8)
def multiprocess_helper_source(target: TargetJax) -> str:
    """The helper's source text for `target`, ending with a newline."""
    text = TEMPLATE.read_text(encoding="utf-8")
    if not text.startswith(HELPER_MARKER) or f"def {HELPER_NAME}(" not in text:
        raise RuntimeError(f"{TEMPLATE}: not the {HELPER_NAME} template")
    start = text.index(_CALL_START)
    end = text.index(_CALL_END, start) + len(_CALL_END)
    call = shard_map_call(target, "dyn_specs", "dyn", indent=16) + "\n"
    return text[:start] + call + text[end:]
