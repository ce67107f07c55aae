"""The global-view style (`--style global`): a program-level rewrite without pmap's device axis.

Where the whole dataflow of a function that calls a pmap site is recognised, the site becomes
`jax.jit(jax.shard_map(body, in_specs, out_specs, check_vma=False))` (body and collectives
unchanged), replicated producers (`device_put_replicated`, `jnp.stack([x] * n)`, ...) become the
unstacked value, per-device batches become one global batch placed with `P(axis)`, and `x[0]` /
`unreplicate` of replicated outputs become direct use. Everything else stays for the faithful
rules, with a PM6xx finding naming the blocker.

Modules, from the driver down:
- `rewrite` (`migrate_global`, the driver), `fixpoint` (which sites and callers go global:
  they fall back together), `callers` (which functions call which sites), `cross_module`
  (steps other modules import, decided with their callers there);
- the site model: `sites` (`Site`, `Blocker`), `site_options` (a site's options, read with
  ast), `site_discovery` (which sites qualify), `classes` (which pmaps a class holds qualify);
- the caller analysis, `dataflow.CallerAnalysis`, built from mixins: `expressions`,
  `site_calls`, `idioms` (producers and consumers), `instances` (a held class's instances in
  a caller), `lowering` (`site.lower(...).compile()` and its calls, `*xs` arguments), with
  `values` (what a local value is), `ranks`, `replication` (which outputs are
  provably the same on every device), `axes` (several axis names), `donation` (PM610);
  `multiprocess`, `process_dependence`, `placement_bindings` (host values made global once,
  where bound) and `call_layout` (the text of the calls it writes) for multi-process modules;
- the emitter: `module_info` (source spans and rendering), `site_edits` (a site's text and
  the composition of edits), `step_text`, `post_passes` (libcst passes, the `_mesh`
  function), `hoist` (local sites built once at module level), `site_findings` (PM600 /
  PM608 messages);
- `layout` (the layout map `check --style global` compares through) and `pipeline_hook`.
"""

from transforms.global_view.rewrite import GlobalResult, migrate_global

__all__ = ["GlobalResult", "migrate_global"]
