"""The helper a multi-process module gets: `_pmap_style_shard_map` with pmap's multi-process
contract (research §2.2 items 8-9, §6).

The single-process helper (transforms/helpers/runtime_helper.py) builds its mesh from
`jax.devices()[:n]`, which on several hosts maps process 0's devices everywhere. This variant,
same name and signature, does what `jax/_src/pmap.py` does when `jax.process_count() > 1`: a
mesh over every process's devices grouped by process, global axis size = local size x
process_count, `multihost_utils.host_local_array_to_global_array` on the way in and
`global_array_to_host_local_array` on the way out, donation on the jit of the global arrays,
and `.lower(...).compile()(...)` converting too (which the new pmap skips).

Where it goes (evidence-based generation): only modules that show multi-process use
(transforms/faithful/multiprocess.py) get this text; every other module keeps the single-process
helper byte for byte. Inside, the process count is read once per mapped size, when the program is
built: with one process the program is the plain `jax.jit` object, so a call costs exactly
what the single-process helper's call costs.

The source is the `# pmap-migrate: if multiprocess` variant of
transforms/templates/pmap_style_shard_map.py, one real Python file (tests import and run it) for
every variant, read here as text: the transform path never imports JAX. This is the variant with
every feature; a module gets the features its sites use (transforms/helpers/helper_features.py).
"""

from __future__ import annotations

from transforms.helpers.helper_templates import FEATURES, helper_text
from transforms.helpers.runtime_helper import HELPER_NAME
from transforms.target import TargetJax


def multiprocess_helper_source(target: TargetJax) -> str:
    """The helper's source text for `target`, ending with a newline."""
    return helper_text(HELPER_NAME, target, FEATURES)
