"""Modules that patch `jax.pmap` keep it: test code faking pmap on one device (PM211, PM212).

`chex.fake_pmap()` / `fake_pmap_and_jit()` and `mock.patch("jax.pmap", ...)` replace
`jax.pmap` while a test runs (transforms/reading/pmap_patches.py). A migrated site no longer
looks `jax.pmap` up, so the patch would silently stop reaching it. So:

- in a module that patches `jax.pmap`, every pmap site stays `jax.pmap` (PM211, claimed for
  PmapToShardMap through transforms/faithful/pmap_hazards.py, in both styles);
- a use of chex's fake around no pmap of its own module (a `with` block without one, or any use
  in a module without one) fakes the pmaps of other modules, which the migration does change:
  the first such use is reported (PM212) with what to do.

Runs before PmapToShardMap, and decides in `visit_Module`, before any site is visited.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.reading.names import ImportTable, parse_or_none
from transforms.reading.pmap_patches import (
    CHEX_FAKES, fakes_of_other_modules, pmap_patch, refers_to_pmap,
)
from transforms.reading.prefilter import all_nodes
from transforms.reporting import ReportingTransformer

SCRATCH_KEY = "pmap_migrate.pmap_patch"  # (line, text) of the module's first patch of jax.pmap
REPORTED_KEY = "pmap_migrate.pmap_patch_reported"  # ids of the sites already given PM211


def keeps_patched_pmap(rule: ReportingTransformer, site: cst.CSTNode) -> bool:
    """For PmapToShardMap: True (and the site reported once) when the module patches jax.pmap."""
    found = rule.context.scratch.get(SCRATCH_KEY)
    if found is None:
        return False
    reported = rule.context.scratch.setdefault(REPORTED_KEY, set())
    if id(site) not in reported:
        reported.add(id(site))
        line, text = found
        rule._report(site, Code.PMAP_KEPT_PATCHED,
                     f"jax.pmap kept: this module patches jax.pmap (`{text}` at "
                     f"line {line}), and a migrated site would no longer call jax.pmap, so the "
                     "patch would stop applying to it; not migrated")
    return True


class PatchedPmap(ReportingTransformer):
    PREFILTER_WORDS = (rb"pmap",)  # fake_pmap and "jax.pmap" both hold it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._fake_elsewhere: tuple[int, int] | None = None  # PM212's place, when it applies

    def visit_Module(self, node: cst.Module) -> None:
        if self.facts is not None:
            tree, imported = self.facts.syntax_tree, self.facts.imports.imported
        else:
            tree = parse_or_none(node.code.encode("utf-8"))
            imported = ImportTable.from_tree(tree).imported
        if tree is None:
            return
        patch = pmap_patch(tree, imported)
        if patch is None:
            return
        if any(refers_to_pmap(node, imported) for node in all_nodes(tree)):
            self.context.scratch[SCRATCH_KEY] = patch
        if elsewhere := fakes_of_other_modules(tree, imported):
            self._fake_elsewhere = elsewhere[0]

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check_fake(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._check_fake(node)

    def _check_fake(self, node: cst.Name | cst.Attribute) -> None:
        if self._fake_elsewhere is None or self._qualified(node).isdisjoint(CHEX_FAKES):
            return
        if self._position(node)[0] != self._fake_elsewhere[0]:
            return
        self._fake_elsewhere = None  # the first such use only
        name = next(iter(self._qualified(node) & CHEX_FAKES)).rpartition(".")[2]
        self._report(
            node, Code.FAKE_PMAP_ELSEWHERE,
            f"`{name}` patches jax.pmap around no pmap of this module: the pmaps it fakes live "
            "in other modules, and once they are migrated they no longer call "
            "jax.pmap, so the fake stops applying and the code under test runs jit + shard_map "
            "on the real devices; run the test on fake CPU devices instead "
            "(chex.set_n_cpu_devices(n), or XLA_FLAGS=--xla_force_host_platform_device_count=n)",
        )

