"""The one question PmapToShardMap asks the hazard rules: is this pmap site theirs?

- a host barrier that `HostBarriers` rewrote to `sync_global_devices` (it reported the site);
- a nested pmap in a multi-process module, which stays `jax.pmap` (reported here, PM505);
- any site of a module that patches `jax.pmap` (a test faking it), which stays `jax.pmap`
  (reported here, PM211).

Rules may share one traversal, so both answers are decided before the site is left: barriers
in `HostBarriers.visit_Call` (the enclosing call is visited before the pmap call is left),
multi-process evidence in `MultiProcess.visit_Module`, patches in `PatchedPmap.visit_Module`.
"""

from __future__ import annotations

import libcst as cst

from transforms.faithful.host_barriers import CLAIMED_KEY
from transforms.faithful.multiprocess import keeps_pmap
from transforms.faithful.patched_pmap import keeps_patched_pmap
from transforms.reporting import ReportingTransformer


def site_claimed(rule: ReportingTransformer, site: cst.CSTNode, *, nested: bool = False) -> bool:
    """True when PmapToShardMap must leave `site` (an original node) as it is. `nested`: the
    site is a nested pmap (pmap(pmap(f)) or stacked decorators)."""
    if site in rule.context.scratch.get(CLAIMED_KEY, ()):
        return True
    return keeps_patched_pmap(rule, site) or keeps_pmap(rule, site, nested=nested)
