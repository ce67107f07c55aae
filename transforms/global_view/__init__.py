"""The global-view style (`--style global`): a program-level rewrite without pmap's device axis.

Where the whole dataflow of a function that calls a pmap site is recognised, the site becomes
`jax.jit(jax.shard_map(body, in_specs, out_specs, check_vma=False))` (body and collectives
unchanged), replicated producers (`device_put_replicated`, `jnp.stack([x] * n)`, ...) become the
unstacked value, per-device batches become one global batch placed with `P(axis)`, and `x[0]` /
`unreplicate` of replicated outputs become direct use. Everything else stays for the faithful
rules, with a PM6xx finding naming the blocker.

Modules: `sites` (which pmap sites and options qualify), `replication` (which outputs are
provably the same on every device), `dataflow` (the callers: producers, consumers, edits),
`rewrite` (applying the edits), `layout` (the layout map `check --style global` compares
through), `multiprocess` and `process_dependence` (multi-process modules: process-local batches
made global, replicated values only where every process has the same one), `classes` (which
pmaps a class holds qualify) and `instances` (following those classes' instances in a caller).
"""

from transforms.global_view.rewrite import GlobalResult, migrate_global

__all__ = ["GlobalResult", "migrate_global"]
