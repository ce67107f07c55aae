"""Collectives with `axis_index_groups` (research §8.10): kept as they are, and said so.

The migrated helper runs shard_map with check_vma=False, under which grouped collectives give
the legacy pmap's results. Measured on 8 CPU devices (jax 0.4.38 legacy pmap, jax 0.10.2 pmap
and the helper, identical): every collective below works with groups of equal size; with
unequal groups psum/pmean/pmax/pmin still work on CPU (TPU requires equal sizes), while
all_gather / psum_scatter / all_to_all fail to lower, in the legacy pmap too. So equal literal
groups are an info finding, unequal or non-literal groups a warning with the reason.

Collectives are recognised by qualified name anywhere in the module: telling whether one runs
inside a pmapped body would take whole-module analysis, and a collective with groups is
pmap-era code anyway. Findings are only made in modules that still reference jax.pmap, so a
migrated module is quiet on a second run.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.reporting import ReportingTransformer

PMAP = "jax.pmap"
# The collectives that take axis_index_groups (keyword-only in jax 0.4.38 and 0.10.2).
REDUCTIONS = {"jax.lax.psum", "jax.lax.pmean", "jax.lax.pmax", "jax.lax.pmin"}
DATA_MOVEMENT = {
    "jax.lax.all_gather", "jax.lax.psum_scatter", "jax.lax.all_to_all", "jax.lax.pswapaxes",
}


class CollectiveGroups(ReportingTransformer):
    PREFILTER_WORDS = (rb"pmap",)  # only modules with pmap sites are reported

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._has_pmap = False
        self._pending: list[tuple[cst.Call, str, str]] = []  # call, code, message

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._has_pmap = self._has_pmap or PMAP in self._qualified(node)

    def visit_Name(self, node: cst.Name) -> None:
        self._has_pmap = self._has_pmap or PMAP in self._qualified(node)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self._qualified(node.func)
        name = next(iter(qualified & (REDUCTIONS | DATA_MOVEMENT)), None)
        if name is None:
            return
        groups = next(
            (a.value for a in node.args if a.keyword and a.keyword.value == "axis_index_groups"),
            None,
        )
        if groups is None or (isinstance(groups, cst.Name) and groups.value == "None"):
            return
        short = name.removeprefix("jax.lax.")
        sizes = _literal_group_sizes(groups)
        if sizes is None:
            self._pending.append((node, Code.COLLECTIVE_GROUPS_HAZARD,
                                  f"`{short}` with axis_index_groups that are "
                                  "not a literal list of lists: their sizes cannot be checked "
                                  "(unequal groups fail on TPU, and for all_gather / "
                                  "psum_scatter / all_to_all fail to lower everywhere)"))
        elif len(set(sizes)) > 1:
            reason = ("fails to lower on every backend, the legacy pmap included"
                      if name in DATA_MOVEMENT else
                      "works on CPU and GPU but fails on TPU, which requires equal group sizes")
            self._pending.append((node, Code.COLLECTIVE_GROUPS_HAZARD,
                                  f"`{short}` with axis_index_groups of unequal "
                                  f"sizes {sizes}: {reason}"))
        else:
            self._pending.append((node, Code.COLLECTIVE_GROUPS_KEPT,
                                  f"`{short}` with axis_index_groups "
                                  f"({len(sizes)} groups of {sizes[0] if sizes else 0}) kept as "
                                  "is: the same result under the migrated shard_map "
                                  "(check_vma=False)"))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self._has_pmap:
            for node, code, message in self._pending:
                self._report(node, code, message)
        return updated_node


def _literal_group_sizes(groups: cst.BaseExpression) -> list[int] | None:
    """The size of each group of a literal `[[0, 1], [2, 3]]` (lists or tuples), else None."""
    if not isinstance(groups, (cst.List, cst.Tuple)):
        return None
    sizes = []
    for element in groups.elements:
        group = element.value
        if isinstance(element, cst.StarredElement):
            return None
        if not isinstance(group, (cst.List, cst.Tuple)) or not all(
            isinstance(e.value, cst.Integer) for e in group.elements
        ):
            return None
        sizes.append(len(group.elements))
    return sizes
