"""Whether migrated code is fully global: no pmap-contract code left in it (issue 41, item 8).

Sites the global style cannot prove a layout for keep pmap's calling contract, written in the
open (`_per_device_shard_map`, `_pmap_mesh`, `_across_processes`) or through the faithful
helpers (`_pmap_style_shard_map`, `_pmap_compat`, `_device_put_replicated`, ...). Users of
such code still carry the device axis through their programs, so counting PM612 as "global"
overstates what they get. Code is *fully global* when none of those functions is named in it
(nor a renamed form such as `_per_device_shard_map_2`, which a module with a name of its own
gets) and no `jax.pmap` is left.

Read from the tokens: a name in a string or a comment (a docstring that mentions
`_pmap_mesh`) is not code. Pure: no jax, no libcst; the report (migrator/report.py) and the
benchmarks (benchmarks/run.py, benchmarks/real_code_sweep.py) share it.
"""

from __future__ import annotations

import io
import re
import tokenize

# The global style's contract functions (global_view/contract_text.CONTRACT_NAMES) and every
# faithful helper (module_helpers.HELPER_ORDER: `_nested_pmap_shard_map` is pmap's contract
# for a nested pmap, `_first_replica` reads row 0 of pmap's stacked layout).
# tests/test_contract_names.py checks this list against both.
PMAP_CONTRACT_NAMES = (
    "_pmap_style_shard_map", "_per_device_shard_map", "_across_processes", "_pmap_mesh",
    "_device_put_replicated", "_device_put_sharded", "_pmap_compat", "_nested_pmap_shard_map",
    "_first_replica",
)
_CONTRACT_NAME = re.compile(rf"(?:{'|'.join(PMAP_CONTRACT_NAMES)})(?:_[0-9]+)?")
_WORDS = re.compile(r"[A-Za-z_]\w*(?:\s*\.\s*pmap\b)?")  # `jax.pmap` as one word
_JAX_PMAP = re.compile(r"jax\s*\.\s*pmap")


def pmap_contract_code(source: str | bytes) -> list[str]:
    """The pmap-contract names `source` uses (contract functions, faithful helpers, and
    `jax.pmap`), each once, in order of first use; [] for fully global code."""
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    found: dict[str, None] = {}
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type in (tokenize.NAME, tokenize.OP)]
    except (tokenize.TokenError, SyntaxError):
        # Not Python as a whole (a notebook's IPython lines): every word counts, strings and
        # comments too; more, never less, than the tokens would find.
        for word in _WORDS.findall(source):
            if _CONTRACT_NAME.fullmatch(word):
                found.setdefault(word)
            elif _JAX_PMAP.fullmatch(word):
                found.setdefault("jax.pmap")
        return list(found)
    for i, token in enumerate(tokens):
        if token.type != tokenize.NAME:
            continue
        if _CONTRACT_NAME.fullmatch(token.string):
            found.setdefault(token.string)
        elif token.string == "pmap" and _after_jax(tokens, i):
            found.setdefault("jax.pmap")
    return list(found)


def is_fully_global(source: str | bytes) -> bool:
    """Whether migrated code holds no pmap-contract code (see the module docstring)."""
    return not pmap_contract_code(source)


def _after_jax(tokens: list[tokenize.TokenInfo], i: int) -> bool:
    """`jax.pmap`, or `pmap` imported from jax (`from jax import pmap`)."""
    if i >= 2 and tokens[i - 1].string == "." and tokens[i - 2].string == "jax":
        return True
    line = [t.string for t in tokens if t.start[0] == tokens[i].start[0]]
    return line[:3] == ["from", "jax", "import"]
